//! A dataset spec, checked: `pb::DatasetSpec` in, the settings the server acts on out.
//! Everything a request can get wrong is found here, before any file is opened.
//! `mix.rs` checks a mixture's spec: its components and their weights; `transforms.rs`
//! its per-element operations.

mod columnar;
mod mix;
pub mod transforms;

pub use mix::MixSpec;

use readerd_proto::v1 as pb;
use sha2::{Digest, Sha256};

use std::sync::Arc;

use bytes::Bytes;

use crate::decode::csv::{CsvColumn, CsvConfig, CsvDefault, CsvDialect};
use crate::decode::example::sequence::SequenceExampleParser;
use crate::decode::example::{DefaultValue, ExampleParser, FeatureSpec, Partition};
use crate::decode::raw::RawConfig;
use crate::decode::{DType, Decoder};
use crate::error::{Result, ServeError};
use crate::format::FormatConfig;
use crate::format::fixed_length::FixedLengthConfig;
use crate::pipeline::select::{Predicate, Scalar, Selection, Test};
use crate::pipeline::shuffle::ShuffleConfig;
use crate::pipeline::{PipelineConfig, Shard};
use crate::source::{Compression, SourceConfig, SourceFormat};
use crate::transform::Transforms;

/// Largest batch a spec may ask for.
const MAX_BATCH_SIZE: i64 = 1 << 20;

/// A validated dataset spec.
#[derive(Clone, Debug)]
pub struct ReaderSpec {
    /// The spec as given (for listing and comparison).
    pub proto: pb::DatasetSpec,
    /// Hex SHA-256 of the spec's canonical encoding (maps sorted, defaults omitted).
    pub fingerprint: String,
    /// File names or glob patterns relative to a data root, in order.
    pub patterns: Vec<String>,
    pub source: SourceConfig,
    /// Records per element; 0 = single records.
    pub batch_size: usize,
    pub drop_remainder: bool,
    /// File order, epochs, sharding, interleave and the shuffle buffer.
    pub pipeline: PipelineConfig,
    /// Elements buffered per stream; `None`: the server's default.
    pub prefetch: Option<usize>,
    /// Which records become examples.
    pub select: Selection,
    /// Records hold several examples along their features' first dimension.
    pub unbatch: bool,
    pub decoder: Arc<Decoder>,
    /// Per-element operations after decoding (`transforms`), before batching.
    pub transforms: Arc<Transforms>,
    /// `onError: SKIP`: drop and count corrupt or undecodable records.
    pub skip_errors: bool,
    /// A mixture of other specs (then no source of its own: `patterns` is empty).
    pub mix: Option<Arc<MixSpec>>,
}

/// What `spec`'s elements hold, feature by feature, and how many there are
/// (`element_count`, counted from the files: `crate::reader::element_count`): `DescribeSpec`.
pub fn describe(spec: &ReaderSpec, element_count: i64) -> pb::DescribeSpecResponse {
    use crate::decode::OutputKind;
    use pb::feature_description::Kind;
    let features = spec
        .output()
        .into_iter()
        .map(|feature| {
            let (kind, splits) = match feature.kind {
                OutputKind::Dense => (Kind::Dense, None),
                OutputKind::PaddedDense => (Kind::PaddedDense, None),
                OutputKind::Sparse => (Kind::Sparse, None),
                OutputKind::Ragged { splits } => (Kind::Ragged, Some(splits)),
            };
            pb::FeatureDescription {
                name: feature.name,
                kind: kind as i32,
                dtype: crate::element::dtype_to_pb(feature.dtype) as i32,
                shape: feature.shape.iter().map(|d| d.map_or(-1, |d| d as i64)).collect(),
                steps: feature.steps,
                row_splits_dtype: splits.map_or(0, |s| crate::element::dtype_to_pb(s) as i32),
            }
        })
        .collect();
    pb::DescribeSpecResponse {
        features,
        batch_size: spec.batch_size as i64,
        drop_remainder: spec.drop_remainder,
        element_count,
    }
}

/// The canonical fingerprint of a spec: equal for specs that mean the same, whatever
/// their JSON spelling (key order, defaults written out, empty sections).
pub fn fingerprint(spec: &pb::DatasetSpec) -> String {
    let mut canonical = spec.clone();
    if canonical.decoder.as_ref().is_some_and(|d| d.kind.is_none()) {
        canonical.decoder = None;
    }
    if canonical.pipeline.as_ref().is_some_and(|p| *p == pb::Pipeline::default()) {
        canonical.pipeline = None;
    }
    let digest = Sha256::digest(prost::Message::encode_to_vec(&canonical));
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn invalid(message: impl Into<String>) -> ServeError {
    ServeError::InvalidSpec(message.into())
}

fn non_negative(value: i64, field: &str) -> Result<u64> {
    u64::try_from(value).map_err(|_| invalid(format!("{field} must not be negative, got {value}")))
}

impl ReaderSpec {
    /// Whether `other`'s records decode as this spec's: the same decoder (features,
    /// defaults, CSV columns, their names and dialect) and the same `onError`. A mixture
    /// of such components decodes each batch as one.
    pub fn decodes_like(&self, other: &ReaderSpec) -> bool {
        self.decoder == other.decoder && self.transforms == other.transforms && self.skip_errors == other.skip_errors
    }

    /// The spec with images its transforms (and its mixture's components') decode
    /// limited to `pixels`.
    pub fn with_max_image_pixels(mut self, pixels: u64) -> Self {
        if !self.transforms.is_empty() {
            Arc::make_mut(&mut self.transforms).max_image_pixels = pixels;
        }
        if let Some(mix) = self.mix.as_mut() {
            let components = std::mem::take(&mut Arc::make_mut(mix).components);
            Arc::make_mut(mix).components = components.into_iter().map(|c| c.with_max_image_pixels(pixels)).collect();
        }
        self
    }

    /// [`ReaderSpec::output`] in words, feature by feature: `(name, description)`. A
    /// mixture's components must agree on it.
    pub fn signature(&self) -> Vec<(String, String)> {
        self.output().into_iter().map(|feature| (feature.name.clone(), feature.describe())).collect()
    }

    /// What an element gives for one record, feature by feature: the decoder's output,
    /// transformed (the schema signatures describe and Flight lays out).
    pub fn output(&self) -> Vec<crate::decode::OutputFeature> {
        if let Some(first) = self.mix.as_ref().and_then(|mix| mix.components.first()) {
            // A mixture's components agree on it (checked when it opens).
            return first.output();
        }
        let decoded = self.decoder.output();
        self.transforms.output(decoded.clone()).unwrap_or(decoded)
    }

    pub fn from_proto(proto: pb::DatasetSpec, max_record_bytes: u64) -> Result<Self> {
        if proto.mix.is_some() {
            return mix::mixture_spec(proto, max_record_bytes);
        }
        let source = proto.source.as_ref().ok_or_else(|| invalid("source is required"))?;
        if source.files.is_empty() {
            return Err(invalid("source.files is empty"));
        }
        let (format, decoder) = match source.format() {
            pb::Format::Parquet | pb::Format::ArrowIpc => {
                columnar::columnar_source(source, proto.decoder.as_ref(), |d| decoder_of(d, CsvDialect::DecodeCsv))?
            }
            _ => {
                let format = framed_format_of(source, &proto, max_record_bytes)?;
                let csv_dialect =
                    if source.format() == pb::Format::Csv { CsvDialect::CsvDataset } else { CsvDialect::DecodeCsv };
                (SourceFormat::Framed(format), decoder_of(proto.decoder.as_ref(), csv_dialect)?)
            }
        };
        let compression = match source.compression() {
            pb::Compression::None => Some(Compression::None),
            pb::Compression::Gzip => Some(Compression::Gzip),
            pb::Compression::Zlib => Some(Compression::Zlib),
            pb::Compression::Auto => None,
        };
        let pipeline = proto.pipeline.clone().unwrap_or_default();
        let num_epochs = match pipeline.num_epochs {
            -1 => None,
            0 => Some(1),
            n if n > 0 => Some(n as u64),
            n => return Err(invalid(format!("pipeline.numEpochs must be -1 (forever) or more, got {n}"))),
        };
        if !(0..=MAX_BATCH_SIZE).contains(&pipeline.batch_size) {
            return Err(invalid(format!("pipeline.batchSize must be in 0..={MAX_BATCH_SIZE}")));
        }
        let pipeline_config = pipeline_config_of(&pipeline, num_epochs)?;
        let transforms = transforms_of(&proto, &decoder, &pipeline)?;
        if pipeline_config.global_shuffle {
            if !matches!(source.compression(), pb::Compression::None | pb::Compression::Auto) {
                return Err(invalid("pipeline.shuffle.global needs random access: uncompressed files only"));
            }
            if matches!(format, SourceFormat::Framed(FormatConfig::Csv { .. })) {
                return Err(invalid(
                    "pipeline.shuffle.global reads TFRECORD, FIXED_LENGTH, TEXT_LINE, PARQUET or ARROW_IPC files",
                ));
            }
        }
        Ok(Self {
            fingerprint: fingerprint(&proto),
            patterns: source.files.clone(),
            source: SourceConfig { format, compression, max_record_bytes },
            batch_size: pipeline.batch_size as usize,
            drop_remainder: pipeline.drop_remainder,
            pipeline: pipeline_config,
            select: selection_of(pipeline.select.as_ref())?,
            unbatch: pipeline.unbatch,
            prefetch: prefetch_of(pipeline.prefetch)?,
            decoder: Arc::new(decoder),
            transforms: Arc::new(transforms),
            skip_errors: pipeline.on_error() == pb::OnError::Skip,
            mix: None,
            proto,
        })
    }
}

/// A spec's `transforms`, checked against what its decoder gives (each step's feature
/// exists and is dense; shapes fit where they are known).
fn transforms_of(proto: &pb::DatasetSpec, decoder: &Decoder, pipeline: &pb::Pipeline) -> Result<Transforms> {
    let transforms = transforms::transforms_of(&proto.transforms, pipeline.seed as u64).map_err(invalid)?;
    if transforms.is_empty() {
        return Ok(transforms);
    }
    if matches!(decoder, Decoder::Columns(columns) if !columns.is_resolved()) {
        // Typed from the first file when the reader opens, and checked then.
        return Ok(transforms);
    }
    let output = decoder.output();
    if pipeline.batch_size > 0 {
        let padded = output.iter().find(|f| f.kind == crate::decode::OutputKind::PaddedDense);
        if let Some(feature) = padded.filter(|f| transforms.reads(&f.name)) {
            return Err(invalid(format!(
                "transforms: {} is a fixedLenSequence feature, padded per batch; a transform reads one record's \
                 dense feature (unbatched specs may transform it)",
                feature.name
            )));
        }
    }
    transforms.output(output).map_err(invalid)?;
    Ok(transforms)
}

fn selection_of(select: Option<&pb::Select>) -> Result<Selection> {
    let Some(select) = select else { return Ok(Selection::default()) };
    let key_buckets = match &select.key_buckets {
        None => None,
        Some(pb::KeyBuckets { buckets, keep }) => {
            if !(1..=1 << 20).contains(buckets) {
                return Err(invalid("pipeline.select.keyBuckets.buckets must be in 1..=1048576"));
            }
            let mut kept = vec![false; *buckets as usize];
            for &bucket in keep {
                let slot = usize::try_from(bucket).ok().and_then(|b| kept.get_mut(b)).ok_or_else(|| {
                    invalid(format!("pipeline.select.keyBuckets.keep: bucket {bucket} is not below {buckets}"))
                })?;
                *slot = true;
            }
            Some((*buckets as u64, kept))
        }
    };
    let scalars = |value: &pb::TensorValue| -> Vec<Scalar> {
        let ints = value.int64_values.iter().map(|&v| Scalar::Int(v));
        let floats = value.float_values.iter().map(|&v| Scalar::Float(v));
        let bytes = value.bytes_values.iter().map(|v| Scalar::Bytes(v.clone()));
        ints.chain(floats).chain(bytes).collect()
    };
    let mut predicates = Vec::with_capacity(select.predicates.len());
    for predicate in &select.predicates {
        use pb::predicate::Test as T;
        let field = format!("pipeline.select.predicates ({})", predicate.feature);
        let test = match predicate.test.as_ref().ok_or_else(|| invalid(format!("{field}: no test")))? {
            T::Equals(value) | T::OneOf(value) => {
                let values = scalars(value);
                if values.is_empty() {
                    return Err(invalid(format!("{field}: no value to compare with")));
                }
                Test::OneOf(values)
            }
            T::Range(range) => Test::Range { min: range.min, max: range.max },
        };
        predicates.push(Predicate { feature: predicate.feature.clone(), test });
    }
    let take = non_negative(select.take, "pipeline.select.take")?;
    Ok(Selection {
        key_buckets,
        predicates,
        skip: non_negative(select.skip, "pipeline.select.skip")?,
        take: (take > 0).then_some(take),
    })
}

/// Most elements a stream may buffer ahead of its trainer.
const MAX_PREFETCH: i64 = 1024;

/// `pipeline.prefetch`: `None` for the server's default.
fn prefetch_of(prefetch: i64) -> Result<Option<usize>> {
    match prefetch {
        0 => Ok(None),
        n if (1..=MAX_PREFETCH).contains(&n) => Ok(Some(n as usize)),
        n => Err(invalid(format!("pipeline.prefetch must be in 0..={MAX_PREFETCH}, got {n}"))),
    }
}
/// Most files read at once by one reader (each has a reading thread).
const MAX_CYCLE_LENGTH: i64 = 256;
/// Most elements a shuffle buffer may hold.
const MAX_SHUFFLE_BUFFER: i64 = 10_000_000;

fn pipeline_config_of(pipeline: &pb::Pipeline, num_epochs: Option<u64>) -> Result<PipelineConfig> {
    let shard = match pipeline.shard {
        None => None,
        Some(pb::Shard { count, index }) => {
            if count < 1 || !(0..count).contains(&index) {
                return Err(invalid(format!(
                    "pipeline.shard needs count >= 1 and 0 <= index < count, got count {count} index {index}"
                )));
            }
            (count > 1).then_some(Shard { count: count as usize, index: index as usize })
        }
    };
    let bounded = |value: i64, field: &str, max: i64| -> Result<usize> {
        if !(0..=max).contains(&value) {
            return Err(invalid(format!("{field} must be in 0..={max}, got {value}")));
        }
        Ok(value.max(1) as usize)
    };
    let global_shuffle = pipeline.shuffle.is_some_and(|shuffle| shuffle.global);
    let shuffle = match pipeline.shuffle {
        None => None,
        Some(_) if global_shuffle => None,
        Some(shuffle) if shuffle.buffer_size == 0 && shuffle.min_after_dequeue == 0 => None,
        Some(shuffle) => {
            let capacity = bounded(shuffle.buffer_size, "pipeline.shuffle.bufferSize", MAX_SHUFFLE_BUFFER)?;
            let min_after_dequeue = match shuffle.min_after_dequeue {
                0 => capacity - 1,
                n if n > 0 && (n as usize) < capacity => n as usize,
                n => {
                    return Err(invalid(format!(
                        "pipeline.shuffle.bufferSize ({capacity}) must exceed minAfterDequeue ({n})"
                    )));
                }
            };
            Some(ShuffleConfig { capacity, min_after_dequeue })
        }
    };
    Ok(PipelineConfig {
        seed: pipeline.seed as u64,
        shuffle_files: pipeline.shuffle_files,
        shard,
        cycle_length: bounded(pipeline.cycle_length, "pipeline.cycleLength", MAX_CYCLE_LENGTH)?,
        block_length: bounded(pipeline.block_length, "pipeline.blockLength", i64::from(u32::MAX))?,
        shuffle,
        global_shuffle,
        num_epochs,
    })
}

/// Largest number of elements a spec's feature shape may describe.
const MAX_SHAPE_ELEMENTS: u64 = 1 << 24;

pub fn dtype_of(dtype: pb::DataType, field: &str) -> Result<DType> {
    use pb::DataType as P;
    Ok(match dtype {
        P::Int8 => DType::Int8,
        P::Int16 => DType::Int16,
        P::Int32 => DType::Int32,
        P::Int64 => DType::Int64,
        P::Uint8 => DType::Uint8,
        P::Uint16 => DType::Uint16,
        P::Bool => DType::Bool,
        P::Float16 => DType::Float16,
        P::Bfloat16 => DType::Bfloat16,
        P::Float32 => DType::Float32,
        P::Float64 => DType::Float64,
        P::Complex64 => DType::Complex64,
        P::String => DType::String,
        P::DtInvalid => return Err(invalid(format!("{field} is required"))),
    })
}

fn shape_of(shape: &[i64], field: &str) -> Result<Vec<usize>> {
    let mut elements: u64 = 1;
    let mut dims = Vec::with_capacity(shape.len());
    for &dim in shape {
        let dim = non_negative(dim, field)?;
        elements = elements.saturating_mul(dim.max(1));
        dims.push(dim as usize);
    }
    if elements > MAX_SHAPE_ELEMENTS {
        return Err(invalid(format!("{field} describes more than {MAX_SHAPE_ELEMENTS} elements")));
    }
    Ok(dims)
}

/// A spec's default value in the feature's dtype.
fn default_of(value: Option<&pb::TensorValue>, dtype: DType, field: &str) -> Result<Option<DefaultValue>> {
    let Some(value) = value else { return Ok(None) };
    Ok(Some(match dtype {
        DType::Int64 => DefaultValue::Int64(value.int64_values.clone()),
        DType::Float32 => DefaultValue::Float(value.float_values.iter().map(|&f| f as f32).collect()),
        DType::String => DefaultValue::Bytes(value.bytes_values.iter().map(|b| Bytes::copy_from_slice(b)).collect()),
        other => return Err(invalid(format!("{field}: no default of dtype {}", other.name()))),
    }))
}

fn feature_of(name: &str, spec: &pb::FeatureSpec) -> Result<FeatureSpec> {
    use pb::feature_spec::Kind;
    let field = |what: &str| format!("feature {name}: {what}");
    Ok(match spec.kind.as_ref().ok_or_else(|| invalid(field("no feature type")))? {
        Kind::FixedLen(f) => {
            let dtype = dtype_of(f.dtype(), &field("dtype"))?;
            FeatureSpec::FixedLen {
                dtype,
                shape: shape_of(&f.shape, &field("shape"))?,
                default: default_of(f.default.as_ref(), dtype, &field("default"))?,
            }
        }
        Kind::FixedLenSequence(f) => {
            let dtype = dtype_of(f.dtype(), &field("dtype"))?;
            FeatureSpec::FixedLenSequence {
                dtype,
                shape: shape_of(&f.shape, &field("shape"))?,
                allow_missing: f.allow_missing,
                default: default_of(f.default.as_ref(), dtype, &field("default"))?,
            }
        }
        Kind::VarLen(f) => FeatureSpec::VarLen { dtype: dtype_of(f.dtype(), &field("dtype"))? },
        Kind::Sparse(f) => FeatureSpec::Sparse {
            index_keys: f.index_keys.clone(),
            value_key: f.value_key.clone(),
            dtype: dtype_of(f.dtype(), &field("dtype"))?,
            size: f.size.clone(),
            already_sorted: f.already_sorted,
        },
        Kind::Ragged(f) => {
            use pb::ragged_partition::Kind as P;
            let mut partitions = Vec::with_capacity(f.partitions.len());
            for partition in &f.partitions {
                partitions.push(match partition.kind.as_ref().ok_or_else(|| invalid(field("empty partition")))? {
                    P::RowSplits(k) => Partition::RowSplits(k.clone()),
                    P::RowLengths(k) => Partition::RowLengths(k.clone()),
                    P::RowStarts(k) => Partition::RowStarts(k.clone()),
                    P::RowLimits(k) => Partition::RowLimits(k.clone()),
                    P::ValueRowIds(k) => Partition::ValueRowIds(k.clone()),
                    P::UniformRowLength(n) => {
                        Partition::UniformRowLength(non_negative(*n, &field("uniformRowLength"))? as usize)
                    }
                });
            }
            // The uniform row lengths are dimensions of the values (or of rows): bounded
            // as a shape's are.
            let uniform = partitions.iter().filter_map(|p| match p {
                Partition::UniformRowLength(n) => Some(*n as u64),
                _ => None,
            });
            if uniform.fold(1u64, |elements, n| elements.saturating_mul(n.max(1))) > MAX_SHAPE_ELEMENTS {
                return Err(invalid(field(&format!(
                    "uniformRowLength partitions describe more than {MAX_SHAPE_ELEMENTS} elements"
                ))));
            }
            FeatureSpec::Ragged {
                dtype: dtype_of(f.dtype(), &field("dtype"))?,
                value_key: if f.value_key.is_empty() { name.to_owned() } else { f.value_key.clone() },
                partitions,
                // Absent: int32, as `tf.io.RaggedFeature`'s default.
                row_splits_dtype: match f.row_splits_dtype() {
                    pb::DataType::DtInvalid => DType::Int32,
                    other => dtype_of(other, &field("rowSplitsDtype"))?,
                },
                validate: f.validate,
            }
        }
    })
}

fn features_of(features: &std::collections::BTreeMap<String, pb::FeatureSpec>) -> Result<Vec<(String, FeatureSpec)>> {
    features.iter().map(|(name, spec)| Ok((name.clone(), feature_of(name, spec)?))).collect()
}

fn csv_config_of(csv: &pb::CsvDecoder) -> Result<CsvConfig> {
    if csv.columns.is_empty() {
        return Err(invalid("decoder.csv.columns is empty"));
    }
    let mut columns = Vec::with_capacity(csv.columns.len());
    for (i, column) in csv.columns.iter().enumerate() {
        let field = format!("decoder.csv.columns[{i}]");
        let dtype = dtype_of(column.dtype(), &format!("{field}.dtype"))?;
        let default = column.default.as_ref().and_then(|value| match dtype {
            DType::Int32 | DType::Int64 => value.int64_values.first().map(|&v| CsvDefault::Int(v)),
            DType::Float32 | DType::Float64 => value.float_values.first().map(|&v| CsvDefault::Float(v)),
            _ => value.bytes_values.first().map(|v| CsvDefault::String(v.clone())),
        });
        columns.push(CsvColumn { dtype, default });
    }
    let select_cols = (!csv.select_cols.is_empty()).then(|| csv.select_cols.clone());
    CsvConfig::new(
        columns,
        csv.field_delim.as_deref().unwrap_or(","),
        csv.use_quote_delim.unwrap_or(true),
        csv.na_value.as_bytes(),
        select_cols,
    )
    .map_err(|err| invalid(format!("decoder.csv: {}", err.message)))
}

/// Output names of CSV columns: the spec's, else `col<i>` (a header may name them later).
pub fn csv_column_names(csv: &pb::CsvDecoder) -> Vec<String> {
    csv.columns
        .iter()
        .enumerate()
        .map(|(i, column)| if column.name.is_empty() { format!("col{i}") } else { column.name.clone() })
        .collect()
}

/// How a framed `source` (TFRECORD, FIXED_LENGTH, TEXT_LINE, CSV) is framed.
fn framed_format_of(source: &pb::Source, proto: &pb::DatasetSpec, max_record_bytes: u64) -> Result<FormatConfig> {
    Ok(match source.format() {
        pb::Format::Tfrecord => FormatConfig::TfRecord,
        pb::Format::TextLine => FormatConfig::TextLine {
            skip_header_lines: non_negative(source.skip_header_lines, "source.skipHeaderLines")?,
        },
        pb::Format::FixedLength => {
            let record_bytes = non_negative(source.record_bytes, "source.recordBytes")?;
            let footer_bytes = non_negative(source.footer_bytes, "source.footerBytes")?;
            if record_bytes == 0 {
                return Err(invalid("source.recordBytes must be positive for FIXED_LENGTH"));
            }
            if record_bytes.saturating_add(footer_bytes) > max_record_bytes {
                return Err(invalid(format!(
                    "source.recordBytes + source.footerBytes exceeds the server's limit of {max_record_bytes} bytes"
                )));
            }
            let hop_bytes = non_negative(source.hop_bytes, "source.hopBytes")?;
            FormatConfig::FixedLength(FixedLengthConfig {
                header_bytes: non_negative(source.header_bytes, "source.headerBytes")?,
                record_bytes,
                footer_bytes,
                hop_bytes: (hop_bytes > 0).then_some(hop_bytes),
            })
        }
        pb::Format::Csv => {
            let Some(pb::decoder::Kind::Csv(csv)) = proto.decoder.as_ref().and_then(|d| d.kind.as_ref()) else {
                return Err(invalid("format CSV needs the csv decoder (decoder.csv)"));
            };
            if source.skip_header_lines != 0 {
                return Err(invalid("format CSV skips no lines: use source.header"));
            }
            let config = csv_config_of(csv)?;
            FormatConfig::Csv {
                header: source.header,
                field_delim: config.field_delim,
                use_quote_delim: config.use_quote_delim,
            }
        }
        pb::Format::Unspecified => return Err(invalid("source.format is required")),
        pb::Format::Parquet | pb::Format::ArrowIpc => unreachable!("columnar formats are not framed"),
    })
}

fn decoder_of(decoder: Option<&pb::Decoder>, csv_dialect: CsvDialect) -> Result<Decoder> {
    use pb::decoder::Kind;
    let spec_error = |err: crate::decode::DecodeError| invalid(err.message);
    Ok(match decoder.and_then(|d| d.kind.as_ref()) {
        None => Decoder::None,
        Some(Kind::Columns(_)) => return Err(invalid("decoder.columns reads PARQUET or ARROW_IPC files")),
        Some(Kind::Raw(raw)) => Decoder::Raw(
            RawConfig::new(
                dtype_of(raw.out_type(), "decoder.raw.outType")?,
                raw.little_endian.unwrap_or(true),
                (raw.fixed_length > 0).then_some(non_negative(raw.fixed_length, "decoder.raw.fixedLength")? as usize),
            )
            .map_err(spec_error)?,
        ),
        Some(Kind::Example(example)) => {
            if example.features.is_empty() {
                return Err(invalid("decoder.example.features is empty"));
            }
            Decoder::Example(ExampleParser::new(features_of(&example.features)?).map_err(spec_error)?)
        }
        Some(Kind::SequenceExample(sequence)) => Decoder::SequenceExample(
            SequenceExampleParser::new(features_of(&sequence.context)?, features_of(&sequence.sequence)?)
                .map_err(spec_error)?,
        ),
        Some(Kind::Csv(csv)) => {
            // Names a header gives are checked when the reader opens (`reader::csv_header`).
            if let Some(name) = repeated_name(csv.columns.iter().map(|c| c.name.as_str()).filter(|n| !n.is_empty())) {
                return Err(invalid(format!("decoder.csv.columns: the name {name} is given twice")));
            }
            Decoder::Csv { config: csv_config_of(csv)?, dialect: csv_dialect, names: csv_column_names(csv) }
        }
    })
}

/// The first name (in sorted order) that `names` hold more than once.
pub fn repeated_name<'a>(names: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut names: Vec<&str> = names.into_iter().collect();
    names.sort_unstable();
    names.windows(2).find(|pair| pair[0] == pair[1]).map(|pair| pair[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<ReaderSpec> {
        ReaderSpec::from_proto(serde_json::from_str(json).unwrap(), 1 << 20)
    }

    #[test]
    fn csv_columns_named_twice_are_refused() {
        let spec = |names: [&str; 2]| {
            let columns = names.map(|n| format!(r#"{{"name": "{n}", "dtype": "INT64"}}"#)).join(",");
            parse(&format!(
                r#"{{"source": {{"files": ["a.csv"], "format": "CSV"}}, "decoder": {{"csv": {{"columns": [{columns}]}}}}}}"#
            ))
        };
        let err = spec(["a", "a"]).unwrap_err().to_string();
        assert!(err.contains("decoder.csv.columns: the name a is given twice"), "{err}");
        assert!(spec(["a", "b"]).is_ok());
        assert!(spec(["", ""]).is_ok(), "unnamed columns are named later (col<i>, or the header)");
    }

    #[test]
    fn maps_the_source_part() {
        let spec = parse(
            r#"{"source": {"files": ["a.bin"], "format": "FIXED_LENGTH", "recordBytes": 4, "hopBytes": 2,
                "compression": "AUTO"}, "pipeline": {"batchSize": 3, "numEpochs": -1}}"#,
        )
        .unwrap();
        assert_eq!(
            spec.source.format,
            SourceFormat::Framed(FormatConfig::FixedLength(FixedLengthConfig {
                header_bytes: 0,
                record_bytes: 4,
                footer_bytes: 0,
                hop_bytes: Some(2)
            }))
        );
        assert_eq!((spec.source.compression, spec.batch_size, spec.pipeline.num_epochs), (None, 3, None));
    }

    #[test]
    fn rejects_bad_and_unimplemented_specs_with_the_right_error() {
        let bad = [
            r#"{}"#,
            r#"{"source": {"files": ["a"]}}"#,
            r#"{"source": {"files": ["a"], "format": "FIXED_LENGTH"}}"#,
            r#"{"source": {"files": ["a"], "format": "FIXED_LENGTH", "recordBytes": 4000000}}"#,
            r#"{"source": {"files": ["a"], "format": "TEXT_LINE"}, "pipeline": {"numEpochs": -2}}"#,
        ];
        for json in bad {
            assert!(matches!(parse(json), Err(ServeError::InvalidSpec(_))), "{json}");
        }
        let bad_decoders = [
            r#"{"source": {"files": ["a"], "format": "TFRECORD"}, "decoder": {"example": {"features": {}}}}"#,
            r#"{"source": {"files": ["a"], "format": "TFRECORD"},
                "decoder": {"example": {"features": {"x": {"fixedLen": {"dtype": "INT32"}}}}}}"#,
            r#"{"source": {"files": ["a"], "format": "TFRECORD"},
                "decoder": {"example": {"features": {"x": {"fixedLen": {"dtype": "INT64", "shape": [-1]}}}}}}"#,
            r#"{"source": {"files": ["a"], "format": "TFRECORD"}, "decoder": {"raw": {"outType": "STRING"}}}"#,
            r#"{"source": {"files": ["a"], "format": "TFRECORD"},
                "decoder": {"raw": {"outType": "INT32", "fixedLength": 6}}}"#,
        ];
        for json in bad_decoders {
            assert!(matches!(parse(json), Err(ServeError::InvalidSpec(_))), "{json}");
        }
        let bad_pipelines = [
            r#"{"source": {"files": ["a"], "format": "TEXT_LINE"}, "pipeline": {"shard": {"count": 2, "index": 2}}}"#,
            r#"{"source": {"files": ["a"], "format": "TEXT_LINE"}, "pipeline": {"cycleLength": -1}}"#,
            r#"{"source": {"files": ["a"], "format": "TEXT_LINE"},
                "pipeline": {"shuffle": {"bufferSize": 4, "minAfterDequeue": 4}}}"#,
        ];
        for json in bad_pipelines {
            assert!(matches!(parse(json), Err(ServeError::InvalidSpec(_))), "{json}");
        }
        let compressed = r#"{"source": {"files": ["a"], "format": "TEXT_LINE", "compression": "GZIP"},
                             "pipeline": {"shuffle": {"global": true}}}"#;
        assert!(matches!(parse(compressed), Err(ServeError::InvalidSpec(_))));
    }

    #[test]
    fn a_ragged_feature_has_int32_row_splits_unless_told_as_tf_io_ragged_feature() {
        let splits = |extra: &str| {
            let json = format!(
                r#"{{"source": {{"files": ["a"], "format": "TFRECORD"}},
                    "decoder": {{"example": {{"features": {{"r": {{"ragged": {{"dtype": "INT64"{extra}}}}}}}}}}}}}"#
            );
            let spec = parse(&json).unwrap();
            let Decoder::Example(parser) = &*spec.decoder else { panic!("an Example decoder") };
            match &parser.features()[0].1 {
                FeatureSpec::Ragged { row_splits_dtype, .. } => *row_splits_dtype,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(splits(""), DType::Int32);
        assert_eq!(splits(r#", "rowSplitsDtype": "INT64""#), DType::Int64);
    }

    #[test]
    fn uniform_row_lengths_are_bounded_as_shapes_are() {
        let ragged = |lengths: &str| {
            parse(&format!(
                r#"{{"source": {{"files": ["a"], "format": "TFRECORD"}}, "decoder": {{"example": {{"features":
                    {{"r": {{"ragged": {{"dtype": "INT64", "partitions": [{lengths}]}}}}}}}}}}}}"#
            ))
        };
        let err = ragged(r#"{"uniformRowLength": 1099511627776}, {"uniformRowLength": 1099511627776}"#).unwrap_err();
        assert!(matches!(&err, ServeError::InvalidSpec(m) if m.contains("feature r: uniformRowLength")), "{err}");
        assert!(ragged(r#"{"uniformRowLength": 4096}, {"uniformRowLength": 4096}"#).is_ok());
    }

    #[test]
    fn fingerprint_ignores_map_order_and_spelled_out_defaults() {
        let a = parse(r#"{"source": {"files": ["a"], "format": "TEXT_LINE", "skipHeaderLines": 0}}"#).unwrap();
        let b = parse(r#"{"source": {"format": "TEXT_LINE", "files": ["a"]}, "pipeline": {}}"#).unwrap();
        let c = parse(r#"{"source": {"files": ["b"], "format": "TEXT_LINE"}}"#).unwrap();
        assert_eq!(a.fingerprint, b.fingerprint);
        assert_ne!(a.fingerprint, c.fingerprint);
    }
}
