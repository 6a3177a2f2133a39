//! The columns and options of a CSV decode ([`CsvConfig`], its [`CsvColumn`]s and their
//! [`CsvDefault`]s), checked as TensorFlow checks `record_defaults`, `field_delim` and
//! `select_cols`, and the [`CsvDialect`] that picks the op's rules.

use bytes::Bytes;

use crate::decode::{DType, DecodeError};

/// The default value of a column (TensorFlow's one-element `record_defaults` entry).
/// Equal defaults give the same bytes: floats are compared bit by bit.
#[derive(Clone, Debug)]
pub enum CsvDefault {
    /// For `Int32` (must fit) and `Int64` columns.
    Int(i64),
    /// For `Float32` (rounded to nearest) and `Float64` columns.
    Float(f64),
    /// For `String` columns.
    String(Bytes),
}

impl PartialEq for CsvDefault {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (CsvDefault::Int(a), CsvDefault::Int(b)) => a == b,
            (CsvDefault::Float(a), CsvDefault::Float(b)) => a.to_bits() == b.to_bits(),
            (CsvDefault::String(a), CsvDefault::String(b)) => a == b,
            _ => false,
        }
    }
}

/// One decoded column.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvColumn {
    /// `Int32`, `Int64`, `Float32`, `Float64` or `String`.
    pub dtype: DType,
    /// `None`: the column is required (TensorFlow's empty default).
    pub default: Option<CsvDefault>,
}

/// How CSV records decode. Build it with [`CsvConfig::new`], which checks it as
/// TensorFlow does.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvConfig {
    pub columns: Vec<CsvColumn>,
    pub field_delim: u8,
    pub use_quote_delim: bool,
    pub na_value: Vec<u8>,
    /// Record fields that become the columns, strictly increasing; `None`: all, in order.
    pub select_cols: Option<Vec<usize>>,
}

/// Which op's splitting rules and error wording apply (see [`crate::decode::csv`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CsvDialect {
    DecodeCsv,
    CsvDataset,
}

impl CsvConfig {
    /// Checks the arguments as `tf.io.decode_csv` (its Python wrapper, then the op) does,
    /// with its messages also for `CsvDataset` (whose op words the `select_cols` checks
    /// differently). `select_cols` is TensorFlow's int64 list.
    pub fn new(
        columns: Vec<CsvColumn>,
        field_delim: &str,
        use_quote_delim: bool,
        na_value: impl Into<Vec<u8>>,
        select_cols: Option<Vec<i64>>,
    ) -> Result<Self, DecodeError> {
        if let Some(select) = &select_cols {
            if select.windows(2).any(|pair| pair[0] >= pair[1]) {
                return Err(DecodeError::new("select_cols is not strictly increasing."));
            }
            if select.first().is_some_and(|&first| first < 0) {
                return Err(DecodeError::new("select_cols contains negative values."));
            }
            if select.len() != columns.len() {
                return Err(DecodeError::new("Length of select_cols and record_defaults do not match."));
            }
        }
        for (i, column) in columns.iter().enumerate() {
            check_column(i, column)?;
        }
        let &[field_delim] = field_delim.as_bytes() else {
            return Err(DecodeError::new("field_delim should be only 1 char"));
        };
        let select_cols = select_cols
            .filter(|select| !select.is_empty())
            .map(|select| select.into_iter().map(|c| c as usize).collect());
        Ok(Self { columns, field_delim, use_quote_delim, na_value: na_value.into(), select_cols })
    }
}

fn check_column(i: usize, column: &CsvColumn) -> Result<(), DecodeError> {
    let fits = match (column.dtype, &column.default) {
        (DType::Int32 | DType::Int64 | DType::Float32 | DType::Float64 | DType::String, None) => true,
        (DType::Int32, Some(CsvDefault::Int(value))) => i32::try_from(*value).is_ok(),
        (DType::Int64, Some(CsvDefault::Int(_)))
        | (DType::Float32 | DType::Float64, Some(CsvDefault::Float(_)))
        | (DType::String, Some(CsvDefault::String(_))) => true,
        (DType::Int32 | DType::Int64 | DType::Float32 | DType::Float64 | DType::String, Some(_)) => false,
        (dtype, _) => {
            return Err(DecodeError::new(format!(
                "record_defaults[{i}] has DataType {} not in list of allowed values: float32, float64, int32, int64, string",
                dtype.name()
            )));
        }
    };
    if fits {
        Ok(())
    } else {
        Err(DecodeError::new(format!(
            "record_defaults[{i}]: {:?} is not a {} value",
            column.default.as_ref().expect("a default"),
            dtype_name(column.dtype)
        )))
    }
}

fn dtype_name(dtype: DType) -> &'static str {
    match dtype {
        DType::Float32 => "float32",
        DType::Float64 => "float64",
        other => other.name(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::csv::testing::*;

    #[test]
    fn checks_arguments_as_tensorflow() {
        let two = || vec![int64(0), int64(0)];
        let err = |columns, delim: &str, select| CsvConfig::new(columns, delim, true, "", select).unwrap_err().message;
        assert_eq!(err(two(), ",", Some(vec![1, 1])), "select_cols is not strictly increasing.");
        assert_eq!(err(two(), ",", Some(vec![-1, 1])), "select_cols contains negative values.");
        assert_eq!(err(two(), ",", Some(vec![0])), "Length of select_cols and record_defaults do not match.");
        for delim in ["", "::", "é"] {
            assert_eq!(err(two(), delim, None), "field_delim should be only 1 char");
        }
        assert!(err(vec![column(DType::Bool, None)], ",", None).contains("DataType bool not in list"));
        assert!(err(vec![column(DType::Int32, Some(CsvDefault::Int(1 << 31)))], ",", None).contains("int32"));
        assert!(err(vec![column(DType::Float32, Some(CsvDefault::Int(1)))], ",", None).contains("float32"));
        assert_eq!(CsvConfig::new(two(), "\t", false, "NA", None).unwrap().field_delim, b'\t');
    }
}
