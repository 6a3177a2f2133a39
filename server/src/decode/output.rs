//! What a decoder gives one record, feature by feature: its output schema
//! ([`OutputFeature`]), as `parse_single_example` and its kin give it. It is written in
//! one place, `Decoder::output`: a mixture's components must agree on it (compared by
//! [`OutputFeature::describe`], which words it for messages), and Flight lays out each
//! feature whose shape it fixes as a fixed-size list (`crate::columns`).

use super::DType;

/// The kind of tensor a feature is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputKind {
    Dense,
    /// Dense, its first dimension (`None` in the shape) padded to the longest record of a
    /// batch (`fixedLenSequence`).
    PaddedDense,
    Sparse,
    /// Ragged, its row partitions split by `splits`.
    Ragged {
        splits: DType,
    },
}

/// One feature of a decoder's output for one record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputFeature {
    pub name: String,
    pub kind: OutputKind,
    pub dtype: DType,
    /// Its shape for one record; `None` where records differ.
    pub shape: Vec<Option<usize>>,
    /// A SequenceExample feature list: each record a list of steps of this.
    pub steps: bool,
}

impl OutputFeature {
    /// A dense feature of fixed `shape`.
    pub fn dense(name: impl Into<String>, dtype: DType, shape: &[usize]) -> Self {
        let shape = shape.iter().map(|&d| Some(d)).collect();
        Self { name: name.into(), kind: OutputKind::Dense, dtype, shape, steps: false }
    }

    /// Its shape for one record when every dimension is fixed and it is one dense tensor
    /// per record (not a list of steps).
    pub fn fixed_shape(&self) -> Option<Vec<usize>> {
        if self.kind != OutputKind::Dense || self.steps {
            return None;
        }
        self.shape.iter().copied().collect()
    }

    /// The feature in words: its kind, dtype and shape (`?` where records differ), as
    /// messages name it (`dense int64 [?] + []`, `ragged float32 [?, 2] splits int64`).
    pub fn describe(&self) -> String {
        let dtype = self.dtype.name();
        let dims = |shape: &[Option<usize>]| -> String {
            match shape.iter().copied().collect::<Option<Vec<usize>>>() {
                Some(fixed) => format!("{fixed:?}"),
                None => {
                    let dims: Vec<String> = shape.iter().map(|d| d.map_or("?".to_owned(), |n| n.to_string())).collect();
                    format!("[{}]", dims.join(", "))
                }
            }
        };
        let tensor = match &self.kind {
            OutputKind::Dense => format!("dense {dtype} {}", dims(&self.shape)),
            OutputKind::PaddedDense => format!("dense {dtype} [?] + {}", dims(self.shape.get(1..).unwrap_or_default())),
            OutputKind::Sparse => format!("sparse {dtype} {}", dims(&self.shape)),
            OutputKind::Ragged { splits } => {
                let dims: Vec<String> =
                    self.shape.iter().map(|d| d.map_or("?".to_owned(), |n| n.to_string())).collect();
                format!("ragged {dtype} [{}] splits {}", dims.join(", "), splits.name())
            }
        };
        if self.steps { format!("a list of steps of {tensor}") } else { tensor }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn features_are_described_as_messages_name_them() {
        let mut feature = OutputFeature::dense("x", DType::Int64, &[2, 3]);
        assert_eq!(feature.describe(), "dense int64 [2, 3]");
        assert_eq!(feature.fixed_shape(), Some(vec![2, 3]));
        feature.kind = OutputKind::PaddedDense;
        feature.shape = vec![None];
        assert_eq!(feature.describe(), "dense int64 [?] + []");
        assert_eq!(feature.fixed_shape(), None);
        feature.kind = OutputKind::Ragged { splits: DType::Int32 };
        feature.shape = vec![None, Some(2)];
        feature.steps = true;
        assert_eq!(feature.describe(), "a list of steps of ragged int64 [?, 2] splits int32");
        feature.kind = OutputKind::Sparse;
        feature.shape = vec![None];
        feature.steps = false;
        assert_eq!(feature.describe(), "sparse int64 [?]");
    }
}
