//! Decoding: records → named tensors, exactly as TensorFlow's ops do. No I/O, no tokio.
//!
//! - [`tensor`] holds the tensor types decoders produce;
//! - [`raw`] is `tf.io.decode_raw`;
//! - [`example`] is `tf.io.parse_example` and `parse_sequence_example`;
//! - [`csv`] is `tf.io.decode_csv`, and the field rules of `tf.data.experimental.CsvDataset`;
//! - [`columnar`] is the `columns` decoder of columnar files' rows (Parquet, Arrow IPC);
//! - [`number`] turns text into numbers as TensorFlow's `strings::safe_strto*` parse it;
//! - [`output`]: what a decoder gives one record, feature by feature (`Decoder::output`);
//! - [`Placement`]: records decoded straight into their rows of a larger batch (a
//!   mixture's, whose components' records alternate).

pub mod columnar;
pub mod csv;
pub mod example;
pub mod number;
pub mod output;
pub mod raw;
pub mod tensor;

pub use output::{OutputFeature, OutputKind};
pub(crate) use tensor::put_le;
pub use tensor::{DType, Dense, DenseStack, Ragged, Sparse, Tensor, Values};

/// A record that does not decode. The message follows TensorFlow's (it names the record
/// and the feature or column); the gRPC code is INVALID_ARGUMENT.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DecodeError {
    pub message: String,
    /// Index in the batch of the record at fault, when the message does not name it.
    pub record: Option<usize>,
}

impl DecodeError {
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), record: None }
    }

    /// An error about record `record` of the batch.
    pub fn at(record: usize, message: impl Into<String>) -> Self {
        Self { message: message.into(), record: Some(record) }
    }
}

/// What a decoder reads of a record: its bytes, or a row of an Arrow batch (a columnar
/// file's, which the `columns` decoder reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordValue {
    Bytes(bytes::Bytes),
    Row(columnar::arrow_rows::ArrowRow),
}

impl RecordValue {
    /// The bytes it holds, or stands for (a row's share of its Arrow batch).
    pub fn len(&self) -> usize {
        match self {
            RecordValue::Bytes(bytes) => bytes.len(),
            RecordValue::Row(row) => row.bytes(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes; `None` for a row of an Arrow batch.
    pub fn as_bytes(&self) -> Option<&bytes::Bytes> {
        match self {
            RecordValue::Bytes(bytes) => Some(bytes),
            RecordValue::Row(_) => None,
        }
    }
}

impl From<bytes::Bytes> for RecordValue {
    fn from(bytes: bytes::Bytes) -> Self {
        RecordValue::Bytes(bytes)
    }
}

/// The bytes of `values`, for a decoder of bytes; a row of an Arrow batch is an error.
fn bytes_of(values: &[RecordValue]) -> Result<Vec<bytes::Bytes>, DecodeError> {
    let bytes = |(i, value): (usize, &RecordValue)| match value {
        RecordValue::Bytes(bytes) => Ok(bytes.clone()),
        RecordValue::Row(_) => {
            Err(DecodeError::at(i, "a row of a columnar file is read by the columns decoder, or as source.column"))
        }
    };
    values.iter().enumerate().map(bytes).collect()
}

/// The rows of `values`, for the `columns` decoder; bytes are an error.
fn rows_of(values: &[RecordValue]) -> Result<Vec<&columnar::arrow_rows::ArrowRow>, DecodeError> {
    let mut rows = Vec::with_capacity(values.len());
    for (i, value) in values.iter().enumerate() {
        match value {
            RecordValue::Row(row) => rows.push(row),
            RecordValue::Bytes(_) => {
                return Err(DecodeError::at(i, "the columns decoder reads rows of Parquet or Arrow IPC files"));
            }
        }
    }
    Ok(rows)
}

/// How a source's records become tensors.
#[derive(Debug, PartialEq)]
pub enum Decoder {
    /// No decoding: one string feature, `value`.
    None,
    Raw(raw::RawConfig),
    Example(example::ExampleParser),
    SequenceExample(example::sequence::SequenceExampleParser),
    /// `decode_csv` on lines (`DecodeCsv`) or `CsvDataset` records; `names` of the columns.
    Csv {
        config: csv::CsvConfig,
        dialect: csv::CsvDialect,
        names: Vec<String>,
    },
    /// Rows of a columnar file, a feature per column.
    Columns(columnar::ColumnarDecoder),
}

/// Where a batch's records go in a larger batch that other decoders fill too: record `i`
/// is row `rows[i]` of `total` rows (each row named once: a row named twice holds the
/// last record written there). [`Decoder::decode_placed`]
/// writes the numeric rows of its fixed-shape dense features there, as it decodes them,
/// into `buffers`: a mixture's decoders, one after the other, fill the same buffers, and
/// nothing is copied to put the rows in order.
#[derive(Debug)]
pub struct Placement<'a> {
    pub rows: &'a [usize],
    pub total: usize,
    pub buffers: &'a mut PlacedBuffers,
}

/// The little-endian bytes of a larger batch's placed features, by feature name: the
/// rows the decoders wrote so far, zeros in the others.
#[derive(Debug, Default)]
pub struct PlacedBuffers {
    /// Each feature's name, with its buffer unless a decoder has it out. Names stay in
    /// place, in the order the first decoder put them: decoders that list their features
    /// alike find each at `next`, the one after the last they used.
    buffers: Vec<(String, Option<Vec<u8>>)>,
    next: usize,
    /// A decoder asked for a feature's buffer at another length than an earlier one left,
    /// or two features had one name.
    conflict: bool,
}

impl PlacedBuffers {
    /// Where feature `name` is, if a decoder put it.
    fn position(&mut self, name: &str) -> Option<usize> {
        let at = match self.buffers.get(self.next) {
            Some((n, _)) if n == name => Some(self.next),
            _ => self.buffers.iter().position(|(n, _)| n == name),
        };
        self.next = at.map_or(0, |at| at + 1);
        at
    }

    /// The buffer of feature `name`, `len` bytes: the one an earlier decoder left, or
    /// zeros. Give it back with [`Self::put`].
    pub fn take(&mut self, name: &str, len: usize) -> Vec<u8> {
        if let Some(at) = self.position(name) {
            match self.buffers[at].1.take() {
                Some(buffer) if buffer.len() == len => return buffer,
                // Out already (a second feature of that name), or of another length.
                _ => self.conflict = true,
            }
        }
        vec![0; len]
    }

    /// Leaves feature `name`'s buffer for the next decoder. Two features of one name (a
    /// CSV's columns named alike) count as a conflict: which one the next decoder would
    /// fill is not known.
    pub fn put(&mut self, name: &str, buffer: Vec<u8>) {
        match self.position(name) {
            Some(at) if self.buffers[at].1.is_none() => self.buffers[at].1 = Some(buffer),
            Some(_) => self.conflict = true,
            None => self.buffers.push((name.to_owned(), Some(buffer))),
        }
    }

    /// Feature `name`'s buffer, taken out; `None` when no decoder placed it, or two asked
    /// for it at different lengths, or two features had that name.
    pub fn take_filled(&mut self, name: &str) -> Option<Vec<u8>> {
        if self.conflict {
            return None;
        }
        let at = self.position(name)?;
        self.buffers[at].1.take()
    }
}

/// A batch decoded with a [`Placement`]: the features as `decode` gives them, except those
/// `placed` says: numeric dense tensors of `total` rows whose values are in the
/// placement's buffers (under the feature's name), not in the tensor (it holds none).
#[derive(Debug)]
pub struct PlacedFeatures {
    pub features: Vec<(String, Tensor)>,
    pub placed: Vec<bool>,
}

/// The feature that carries undecoded records.
pub const RAW_FEATURE: &str = "value";

/// Bytes a decoded element takes at least, per element of a dtype (a string is a
/// `Bytes` handle, its bytes shared with the record).
pub(crate) fn element_bytes(dtype: DType) -> u64 {
    dtype.size().unwrap_or(std::mem::size_of::<bytes::Bytes>()) as u64
}

impl Decoder {
    /// Bytes of memory every decoded record takes whatever its content, known from the
    /// spec alone: dense features of fixed shape, CSV columns, raw records of a fixed
    /// length (a string element counts as its handle). A batch's decoded size is at least
    /// this times its records (saturating).
    pub fn fixed_bytes_per_record(&self) -> u64 {
        match self {
            // One handle per record; batches are at most 2^20 records.
            Decoder::None => 0,
            Decoder::Raw(config) => config.fixed_length.map_or(0, |bytes| bytes as u64),
            Decoder::Example(parser) => parser.fixed_bytes_per_record(),
            Decoder::SequenceExample(parser) => parser.fixed_bytes_per_record(),
            Decoder::Csv { config, .. } => {
                config.columns.iter().map(|column| element_bytes(column.dtype)).fold(0, u64::saturating_add)
            }
            Decoder::Columns(decoder) => decoder.fixed_bytes_per_record(),
        }
    }

    /// What the decoder gives one record, feature by feature (its output schema, written
    /// here only), as `parse_single_example` and its kin give it. A SequenceExample's
    /// feature lists are lists of steps (`length/` features come only with batches).
    pub fn output(&self) -> Vec<OutputFeature> {
        let of_specs = |features: &[(String, example::FeatureSpec)], prefix: &str, steps: bool| {
            let feature = |(name, spec): &(String, example::FeatureSpec)| OutputFeature {
                steps,
                ..feature_output(format!("{prefix}{name}"), spec)
            };
            features.iter().map(feature).collect::<Vec<_>>()
        };
        match self {
            Decoder::None => vec![OutputFeature::dense(RAW_FEATURE, DType::String, &[])],
            Decoder::Raw(config) => {
                let size = config.out_type.size().unwrap_or(1);
                let length = config.fixed_length.map(|bytes| bytes / size);
                let shape = vec![length];
                vec![OutputFeature { shape, ..OutputFeature::dense(RAW_FEATURE, config.out_type, &[]) }]
            }
            Decoder::Csv { config, names, .. } => names
                .iter()
                .zip(&config.columns)
                .map(|(name, column)| OutputFeature::dense(name.clone(), column.dtype, &[]))
                .collect(),
            Decoder::Example(parser) => of_specs(parser.features(), "", false),
            Decoder::Columns(decoder) => decoder.output(),
            Decoder::SequenceExample(parser) => {
                let mut features = of_specs(parser.context_features(), "context/", false);
                features.extend(of_specs(parser.sequence_features(), "sequence/", true));
                features
            }
        }
    }

    /// [`Decoder::output`] in words, feature by feature: `(name, description)`. A
    /// mixture's components must agree on it.
    pub fn signature(&self) -> Vec<(String, String)> {
        self.output().into_iter().map(|feature| (feature.name.clone(), feature.describe())).collect()
    }

    /// Decodes a batch as `decode` does (batched, without keys), with the numeric rows of
    /// its fixed-shape dense features written at their places (see [`Placement`]): an
    /// Example's numeric `fixedLen` features, a CSV's numeric columns. Other decoders
    /// (raw, undecoded, SequenceExample) and other features place nothing (`placed`
    /// false). A panic if `place` does not name a row of `total` for each record.
    pub fn decode_placed(
        &self,
        values: &[RecordValue],
        place: &mut Placement<'_>,
    ) -> Result<PlacedFeatures, DecodeError> {
        assert_eq!(place.rows.len(), values.len(), "a row for each record");
        if let Decoder::Columns(_) | Decoder::None | Decoder::Raw(_) | Decoder::SequenceExample(_) = self {
            let features = self.decode_records(values, &[], true)?;
            let placed = vec![false; features.len()];
            return Ok(PlacedFeatures { features, placed });
        }
        let values = bytes_of(values)?;
        let values = &values[..];
        match self {
            Decoder::Example(parser) => {
                let features = parser.parse_placed(values, place)?;
                let placed = parser.features().iter().map(|(_, spec)| example::places(spec)).collect();
                Ok(PlacedFeatures { features, placed })
            }
            Decoder::Csv { config, dialect, names } => {
                let columns = csv::decode_placed(config, *dialect, values, place, names)
                    .map_err(|err| DecodeError { record: err.record.or(err.error.record), ..err.error })?;
                let placed = config.columns.iter().map(|column| column.dtype.size().is_some()).collect();
                let features = names.iter().cloned().zip(columns.into_iter().map(Tensor::Dense)).collect();
                Ok(PlacedFeatures { features, placed })
            }
            Decoder::None | Decoder::Raw(_) | Decoder::SequenceExample(_) | Decoder::Columns(_) => {
                unreachable!("decoded above")
            }
        }
    }

    /// Whether decoding a record only copies its values (columnar rows, raw bytes, no
    /// decoding): less work than handing a batch to another thread and back.
    pub fn only_copies(&self) -> bool {
        matches!(self, Decoder::Columns(_) | Decoder::Raw(_) | Decoder::None)
    }

    /// [`Decoder::decode`] of records: rows of Arrow batches for the `columns` decoder,
    /// bytes for every other.
    pub fn decode_records(
        &self,
        values: &[RecordValue],
        keys: &[String],
        batched: bool,
    ) -> Result<Vec<(String, Tensor)>, DecodeError> {
        match self {
            Decoder::Columns(decoder) => decoder.decode(&rows_of(values)?, keys, batched),
            _ => self.decode(&bytes_of(values)?, keys, batched),
        }
    }

    /// Decodes a batch (`batched`: shapes `[B, ...]`) or a single record (`!batched`).
    /// `keys` name the records in messages, as TensorFlow's `example_names`.
    pub fn decode(
        &self,
        values: &[bytes::Bytes],
        keys: &[String],
        batched: bool,
    ) -> Result<Vec<(String, Tensor)>, DecodeError> {
        let shape = if batched { vec![values.len()] } else { Vec::new() };
        match self {
            Decoder::None => Ok(vec![(RAW_FEATURE.to_owned(), Tensor::Dense(Dense::strings(shape, values.to_vec())))]),
            Decoder::Raw(config) => {
                Ok(vec![(RAW_FEATURE.to_owned(), Tensor::Dense(raw::decode_raw(config, values, &shape)?))])
            }
            Decoder::Example(parser) => parser.parse(values, Some(keys), batched),
            Decoder::Columns(_) => {
                Err(DecodeError::new("the columns decoder reads rows of Parquet or Arrow IPC files, not bytes"))
            }
            Decoder::Csv { config, dialect, names } => {
                let mut columns = csv::decode_batch(config, *dialect, values)
                    .map_err(|err| DecodeError { record: err.record.or(err.error.record), ..err.error })?;
                if !batched {
                    columns.iter_mut().for_each(|column| column.shape.clear());
                }
                Ok(names.iter().cloned().zip(columns.into_iter().map(Tensor::Dense)).collect())
            }
            Decoder::SequenceExample(parser) => {
                let parsed = parser.parse(values, Some(keys), batched)?;
                fn prefixed(
                    prefix: &'static str,
                    features: Vec<(String, Tensor)>,
                ) -> impl Iterator<Item = (String, Tensor)> {
                    features.into_iter().map(move |(name, tensor)| (format!("{prefix}/{name}"), tensor))
                }
                Ok(prefixed("context", parsed.context)
                    .chain(prefixed("sequence", parsed.feature_lists))
                    .chain(prefixed("length", parsed.lengths))
                    .collect())
            }
        }
    }
}

/// What a feature of an Example gives one record.
fn feature_output(name: String, spec: &example::FeatureSpec) -> OutputFeature {
    use example::{FeatureSpec as F, Partition};
    let fixed = |shape: &[usize]| shape.iter().map(|&d| Some(d)).collect::<Vec<_>>();
    let (kind, dtype, shape) = match spec {
        F::FixedLen { dtype, shape, .. } => (OutputKind::Dense, *dtype, fixed(shape)),
        F::FixedLenSequence { dtype, shape, .. } => {
            (OutputKind::PaddedDense, *dtype, std::iter::once(None).chain(fixed(shape)).collect())
        }
        F::VarLen { dtype } => (OutputKind::Sparse, *dtype, vec![None]),
        F::Sparse { dtype, size, .. } => {
            (OutputKind::Sparse, *dtype, size.iter().map(|&d| usize::try_from(d).ok()).collect())
        }
        F::Ragged { dtype, partitions, row_splits_dtype, .. } => {
            let dims = partitions
                .iter()
                .map(|p| match p {
                    Partition::UniformRowLength(n) => Some(*n),
                    _ => None,
                })
                .collect();
            (OutputKind::Ragged { splits: *row_splits_dtype }, *dtype, dims)
        }
    };
    OutputFeature { name, kind, dtype, shape, steps: false }
}
