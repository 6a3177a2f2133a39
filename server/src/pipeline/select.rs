//! Which records become examples, declaratively: splits by a stable hash of the record
//! key, predicates on decoded scalar features, and per-epoch skip / take.

use bytes::Bytes;

use crate::decode::{DType, Dense, Tensor, Values};

#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    Int(i64),
    Float(f64),
    Bytes(Bytes),
}

impl Scalar {
    fn matches(&self, other: &Scalar) -> bool {
        match (self, other) {
            (Scalar::Bytes(a), Scalar::Bytes(b)) => a == b,
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (a, b) => a.number().zip(b.number()).is_some_and(|(a, b)| a == b),
        }
    }

    fn number(&self) -> Option<f64> {
        match self {
            Scalar::Int(v) => Some(*v as f64),
            Scalar::Float(v) => Some(*v),
            Scalar::Bytes(_) => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Test {
    /// Equal to one of the values (one value: `equals`).
    OneOf(Vec<Scalar>),
    /// `min <= value < max`.
    Range { min: Option<f64>, max: Option<f64> },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Predicate {
    pub feature: String,
    pub test: Test,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Selection {
    /// `(buckets, keep[bucket])`.
    pub key_buckets: Option<(u64, Vec<bool>)>,
    pub predicates: Vec<Predicate>,
    pub skip: u64,
    /// `None`: all.
    pub take: Option<u64>,
}

/// FNV-1a, 64 bits: a stable hash of a record key (it must never change: a split made
/// today must hold the same records next year).
pub fn key_hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3))
}

fn scalar_of(dense: &Dense) -> Option<Scalar> {
    if dense.num_elements() != 1 {
        return None;
    }
    match &dense.values {
        Values::Strings(strings) => strings.first().cloned().map(Scalar::Bytes),
        Values::Bytes(b) => Some(match dense.dtype {
            DType::Int8 => Scalar::Int(i64::from(b[0] as i8)),
            DType::Uint8 | DType::Bool => Scalar::Int(i64::from(b[0])),
            DType::Int16 => Scalar::Int(i64::from(i16::from_le_bytes([b[0], b[1]]))),
            DType::Uint16 => Scalar::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))),
            DType::Int32 => Scalar::Int(i64::from(i32::from_le_bytes(b[..4].try_into().ok()?))),
            DType::Int64 => Scalar::Int(i64::from_le_bytes(b[..8].try_into().ok()?)),
            DType::Float32 => Scalar::Float(f64::from(f32::from_le_bytes(b[..4].try_into().ok()?))),
            DType::Float64 => Scalar::Float(f64::from_le_bytes(b[..8].try_into().ok()?)),
            DType::Float16 | DType::Bfloat16 | DType::Complex64 | DType::String => return None,
        }),
    }
}

impl Selection {
    pub fn is_empty(&self) -> bool {
        *self == Selection::default()
    }

    /// Whether it counts records (`skip`, `take`), not only tests each one.
    pub fn counts(&self) -> bool {
        self.skip > 0 || self.take.is_some()
    }

    /// Whether the key's bucket is kept.
    pub fn keeps_key(&self, key: &str) -> bool {
        match &self.key_buckets {
            None => true,
            Some((buckets, keep)) => keep[(key_hash(key) % buckets) as usize],
        }
    }

    /// Whether the predicates need the record decoded.
    pub fn needs_features(&self) -> bool {
        !self.predicates.is_empty()
    }

    /// Whether every predicate holds on a record's decoded features; an error names a
    /// predicate feature that is not a scalar of the output.
    pub fn keeps_features(&self, features: &[(String, Tensor)]) -> Result<bool, String> {
        for predicate in &self.predicates {
            let value = features
                .iter()
                .find(|(name, _)| *name == predicate.feature)
                .and_then(|(_, tensor)| match tensor {
                    Tensor::Dense(dense) => scalar_of(dense),
                    _ => None,
                })
                .ok_or_else(|| {
                    format!(
                        "select predicate: {} is not a numeric or string scalar feature of the decoder's output",
                        predicate.feature
                    )
                })?;
            let holds = match &predicate.test {
                Test::OneOf(values) => values.iter().any(|v| v.matches(&value)),
                Test::Range { min, max } => {
                    value.number().is_some_and(|v| min.is_none_or(|min| v >= min) && max.is_none_or(|max| v < max))
                }
            };
            if !holds {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_buckets_are_stable_and_partition_keys() {
        assert_eq!(key_hash("a.tfrecord:0"), key_hash("a.tfrecord:0"));
        assert_eq!(key_hash(""), 0xcbf2_9ce4_8422_2325);
        let train = Selection { key_buckets: Some((10, (0..10).map(|b| b < 8).collect())), ..Default::default() };
        let eval = Selection { key_buckets: Some((10, (0..10).map(|b| b >= 8).collect())), ..Default::default() };
        let keys: Vec<String> = (0..1000).map(|i| format!("f.txt:{i}")).collect();
        let in_train = keys.iter().filter(|k| train.keeps_key(k)).count();
        assert!(keys.iter().all(|k| train.keeps_key(k) != eval.keeps_key(k)), "the splits never overlap");
        assert!((700..900).contains(&in_train), "{in_train} of 1000 in an 80% split");
    }

    #[test]
    fn predicates_test_decoded_scalars() {
        let features = vec![
            ("label".to_owned(), Tensor::Dense(Dense::int64(vec![], &[3]))),
            ("score".to_owned(), Tensor::Dense(Dense::float32(vec![], &[0.25]))),
            ("name".to_owned(), Tensor::Dense(Dense::strings(vec![], vec![Bytes::from_static(b"cat")]))),
        ];
        let with = |predicates| Selection { predicates, ..Default::default() };
        let one_of = |feature: &str, values| Predicate { feature: feature.into(), test: Test::OneOf(values) };
        assert!(with(vec![one_of("label", vec![Scalar::Int(3)])]).keeps_features(&features).unwrap());
        assert!(with(vec![one_of("label", vec![Scalar::Float(3.0)])]).keeps_features(&features).unwrap());
        assert!(
            !with(vec![one_of("name", vec![Scalar::Bytes(Bytes::from_static(b"dog"))])])
                .keeps_features(&features)
                .unwrap()
        );
        let range = Predicate { feature: "score".into(), test: Test::Range { min: Some(0.25), max: Some(0.5) } };
        assert!(with(vec![range]).keeps_features(&features).unwrap());
        let range = Predicate { feature: "score".into(), test: Test::Range { min: None, max: Some(0.25) } };
        assert!(!with(vec![range]).keeps_features(&features).unwrap());
        assert!(with(vec![one_of("missing", vec![Scalar::Int(1)])]).keeps_features(&features).is_err());
    }
}
