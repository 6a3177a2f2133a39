//! Entry points for fuzzing (the `fuzz/` targets of cargo fuzz, and the bounded smoke run
//! in the tests): each takes arbitrary bytes and must return, never panic or allocate
//! what the bytes claim.

use std::sync::{Arc, LazyLock};

use bytes::Bytes;
use readerd_proto::v1 as pb;

use crate::decode::Decoder;
use crate::format::{FormatConfig, Framed, WorkUnit};
use crate::limits::Limits;
use crate::spec::ReaderSpec;

/// Frames `data` as a whole TFRecord file; returns the records framed before the end or
/// the first error.
pub fn frame_tfrecord(data: &[u8]) -> usize {
    frame(&FormatConfig::TfRecord, data)
}

/// Frames `data` as a whole CSV file (`CsvDataset` framing with a header).
pub fn frame_csv(data: &[u8]) -> usize {
    frame(&FormatConfig::Csv { header: true, field_delim: b',', use_quote_delim: true }, data)
}

fn frame(format: &FormatConfig, data: &[u8]) -> usize {
    let mut framer = format.framer(&WorkUnit { name: "fuzz", len: Some(data.len() as u64) }, 1 << 20);
    let (mut start, mut records) = (0usize, 0usize);
    loop {
        match framer.frame(&data[start..], true) {
            Ok(Framed::Record { consume, .. }) => {
                records += 1;
                start += consume;
            }
            Ok(Framed::Skip { consume }) => start += consume,
            Ok(Framed::NeedMore { .. } | Framed::End) | Err(_) => return records,
        }
        assert!(start <= data.len(), "a framer consumed past the end of its window");
    }
}

fn decoder(spec: serde_json::Value) -> Arc<Decoder> {
    let proto: pb::DatasetSpec = serde_json::from_value(spec).expect("a valid spec");
    let spec = ReaderSpec::from_proto(proto, 1 << 20).expect("a valid spec");
    spec.decoder.clone()
}

/// An Example decoder with every kind of feature.
static EXAMPLE: LazyLock<Arc<Decoder>> = LazyLock::new(|| {
    decoder(serde_json::json!({
        "source": {"files": ["x"], "format": "TFRECORD"},
        "decoder": {"example": {"features": {
            "label": {"fixedLen": {"dtype": "INT64", "shape": [], "default": {"int64Values": [0]}}},
            "emb": {"fixedLenSequence": {"dtype": "FLOAT32", "shape": [2], "allowMissing": true}},
            "tokens": {"varLen": {"dtype": "STRING"}},
            "pairs": {"sparse": {"indexKeys": ["ix"], "valueKey": "vals", "dtype": "FLOAT32", "size": [50]}},
            "spans": {"ragged": {"dtype": "INT64", "valueKey": "spans", "partitions": [{"rowLengths": "lens"}]}}
        }}}
    }))
});

/// A `decode_csv` decoder of three columns (int, float, string).
static CSV: LazyLock<Arc<Decoder>> = LazyLock::new(|| {
    decoder(serde_json::json!({
        "source": {"files": ["x"], "format": "TEXT_LINE"},
        "decoder": {"csv": {"columns": [
            {"name": "id", "dtype": "INT64", "default": {"int64Values": [0]}},
            {"name": "x", "dtype": "FLOAT32"},
            {"name": "s", "dtype": "STRING", "default": {"bytesValues": []}}
        ]}}
    }))
});

/// Decodes `data` as a batch of serialized Examples (split at each `0xff`) and as one.
pub fn decode_example(data: &[u8]) -> bool {
    decode(&EXAMPLE, data)
}

/// Decodes `data`'s lines as a batch of CSV records.
pub fn decode_csv(data: &[u8]) -> bool {
    let lines: Vec<Bytes> = data.split(|&b| b == b'\n').map(Bytes::copy_from_slice).collect();
    let keys: Vec<String> = (0..lines.len()).map(|i| format!("fuzz:{i}")).collect();
    CSV.decode(&lines, &keys, true).is_ok()
}

fn decode(decoder: &Decoder, data: &[u8]) -> bool {
    let records: Vec<Bytes> = data.split(|&b| b == 0xff).map(Bytes::copy_from_slice).collect();
    let keys: Vec<String> = (0..records.len()).map(|i| format!("fuzz:{i}")).collect();
    let batch = decoder.decode(&records, &keys, true).is_ok();
    let single = decoder.decode(&[Bytes::copy_from_slice(data)], &keys[..1], false).is_ok();
    batch || single
}

/// Checks `data` as a spec, in its JSON form and in its protobuf encoding, as `Read` does
/// (`--max-batch-bytes` of 1 MiB); a spec that passes decodes a batch of empty records.
/// Returns whether one of the forms was accepted. Nothing may panic, and nothing the spec
/// claims may be allocated before the checks.
pub fn check_spec(data: &[u8]) -> bool {
    let json = serde_json::from_slice::<pb::DatasetSpec>(data).ok();
    let binary = <pb::DatasetSpec as prost::Message>::decode(data).ok();
    let limits = Limits { batch_bytes: 1 << 20, ..Limits::default() };
    let mut accepted = false;
    for proto in json.into_iter().chain(binary) {
        let Ok(spec) = ReaderSpec::from_proto(proto, 1 << 20) else { continue };
        if limits.check_spec(&spec).is_err() {
            continue;
        }
        accepted = true;
        let records = vec![Bytes::new(); spec.batch_size.clamp(1, 4)];
        let keys: Vec<String> = (0..records.len()).map(|i| format!("fuzz:{i}")).collect();
        let _ = spec.decoder.decode(&records, &keys, spec.batch_size > 0);
    }
    accepted
}

/// Decodes records with a spec, both made from `data`: its bytes are the choices of a
/// spec (an Example, SequenceExample or raw decoder, whose features have any kind,
/// dtype, shape — zero-size dimensions included —, default and partitions) and of the
/// records (Examples or SequenceExamples of those features' keys with lists of any kind
/// and length, or raw bytes). A spec the checks accept decodes the records as a batch
/// and the first as one record; what decodes is then cut into messages by rows, joined
/// back (it must give the element again) and laid out as Arrow columns. Returns whether
/// something decoded. Nothing may panic.
pub fn decode_with_spec(data: &[u8]) -> bool {
    let mut choices = Choices(data);
    let sequence = choices.below(4) == 0;
    let batch_size = choices.below(4);
    let decoder = match choices.below(8) {
        0 => serde_json::json!({"raw": {"outType": choices.pick(&DTYPES), "fixedLength": choices.below(5),
                                         "littleEndian": choices.flag()}}),
        _ if sequence => serde_json::json!({"sequenceExample": {
            "context": spec_features(&mut choices),
            "sequence": spec_features(&mut choices)}}),
        _ => serde_json::json!({"example": {"features": spec_features(&mut choices)}}),
    };
    let spec = serde_json::json!({"source": {"files": ["x"], "format": "TFRECORD"}, "decoder": decoder,
                                  "pipeline": {"batchSize": batch_size}});
    let Ok(proto) = serde_json::from_value::<pb::DatasetSpec>(spec) else { return false };
    let Ok(spec) = ReaderSpec::from_proto(proto.clone(), 1 << 20) else { return false };
    let limits = Limits { batch_bytes: 1 << 20, ..Limits::default() };
    if limits.check_spec(&spec).is_err() {
        return false;
    }
    let records: Vec<Bytes> = (0..1 + choices.below(4)).map(|_| Bytes::from(record(&mut choices, sequence))).collect();
    let keys: Vec<String> = (0..records.len()).map(|i| format!("fuzz:{i}")).collect();
    let mut decoded = false;
    for (count, batched) in [(records.len(), true), (1, false)] {
        if let Ok(features) = spec.decoder.decode(&records[..count], &keys[..count], batched) {
            decoded = true;
            send(&spec.output(), features, &keys[..count], batched);
        }
    }
    let mut buffers = crate::decode::PlacedBuffers::default();
    let rows: Vec<usize> = (0..records.len()).rev().collect();
    let mut place = crate::decode::Placement { rows: &rows, total: records.len(), buffers: &mut buffers };
    let values: Vec<crate::decode::RecordValue> = records.into_iter().map(Into::into).collect();
    decoded |= spec.decoder.decode_placed(&values, &mut place).is_ok();
    decoded
}

/// An element's way to a trainer: as messages of a few rows each, joined back, and as
/// Arrow columns.
fn send(
    output: &[crate::decode::OutputFeature],
    features: Vec<(String, crate::decode::Tensor)>,
    keys: &[String],
    batched: bool,
) {
    use crate::element::{Element, Keys, element_to_pb};
    let element = element_to_pb(0, Element::new(Keys::Strings(keys.to_vec()), features, vec![]));
    for max_bytes in [1, 24] {
        let mut joiner = readerd_proto::rows::RowJoiner::default();
        let mut joined = None;
        for part in readerd_proto::rows::split_rows(element.clone(), max_bytes) {
            joined = joiner.push(part).expect("the parts of an element join");
        }
        assert_eq!(joined.as_ref(), Some(&element), "an element split by rows joins back to itself");
    }
    let _ = crate::columns::BatchEncoder::new(batched, output, "fuzz", 0).encode(element);
}

/// The choices a fuzz input makes, read off its front (zeros once it is used up).
struct Choices<'a>(&'a [u8]);

impl Choices<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&byte, rest)) => {
                self.0 = rest;
                byte
            }
            None => 0,
        }
    }

    /// In `0..n`, `n` > 0.
    fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }

    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
}

/// Feature keys: feature names, value, index and partition keys all come from these, so
/// that they meet.
const KEYS: [&str; 6] = ["a", "b", "c", "i", "j", "r"];
/// The list dtypes three times as often as the others (which specs refuse).
const DTYPES: [&str; 12] = [
    "INT64", "FLOAT32", "STRING", "INT64", "FLOAT32", "STRING", "INT64", "FLOAT32", "STRING", "INT32", "BOOL", "UINT8",
];
/// Dimensions: small and zero mostly, and one a spec must refuse or bound.
const DIMS: [i64; 8] = [0, 1, 2, 3, 0, 1, 2, 1 << 40];

fn dims(choices: &mut Choices<'_>, max_rank: usize) -> Vec<i64> {
    (0..choices.below(max_rank + 1)).map(|_| choices.pick(&DIMS)).collect()
}

/// A default of 0 to 4 values, of the dtype's kind mostly.
fn default_value(choices: &mut Choices<'_>) -> serde_json::Value {
    let values: Vec<i64> = (0..choices.below(5)).map(|_| i64::from(choices.byte() as i8)).collect();
    match choices.below(3) {
        0 => serde_json::json!({"int64Values": values}),
        1 => serde_json::json!({"floatValues": values}),
        _ => serde_json::json!({"bytesValues": values.iter().map(|v| format!("{v:02}")).collect::<Vec<_>>()}),
    }
}

fn spec_features(choices: &mut Choices<'_>) -> serde_json::Value {
    let mut features = serde_json::Map::new();
    for _ in 0..choices.below(4) {
        let name = choices.pick(&KEYS);
        let dtype = choices.pick(&DTYPES);
        let feature = match choices.below(5) {
            0 | 1 => {
                let mut fixed = serde_json::json!({"dtype": dtype, "shape": dims(choices, 3)});
                if choices.flag() {
                    fixed["default"] = default_value(choices);
                }
                serde_json::json!({"fixedLen": fixed})
            }
            2 => {
                let mut sequence =
                    serde_json::json!({"dtype": dtype, "shape": dims(choices, 2), "allowMissing": choices.flag()});
                if choices.flag() {
                    sequence["default"] = default_value(choices);
                }
                serde_json::json!({"fixedLenSequence": sequence})
            }
            3 if choices.flag() => serde_json::json!({"varLen": {"dtype": dtype}}),
            3 => {
                let index_keys: Vec<&str> = (0..choices.below(3)).map(|_| choices.pick(&KEYS)).collect();
                serde_json::json!({"sparse": {"indexKeys": index_keys, "valueKey": choices.pick(&KEYS),
                    "dtype": dtype, "size": dims(choices, 2), "alreadySorted": choices.flag()}})
            }
            _ => {
                let partitions: Vec<serde_json::Value> = (0..choices.below(4))
                    .map(|_| {
                        let key = choices.pick(&KEYS);
                        match choices.below(6) {
                            0 => serde_json::json!({"rowSplits": key}),
                            1 => serde_json::json!({"rowLengths": key}),
                            2 => serde_json::json!({"rowStarts": key}),
                            3 => serde_json::json!({"rowLimits": key}),
                            4 => serde_json::json!({"valueRowIds": key}),
                            _ => serde_json::json!({"uniformRowLength": choices.pick(&DIMS)}),
                        }
                    })
                    .collect();
                serde_json::json!({"ragged": {"dtype": dtype, "valueKey": choices.pick(&KEYS),
                    "partitions": partitions, "rowSplitsDtype": choices.pick(&["INT64", "INT32"]),
                    "validate": choices.flag()}})
            }
        };
        features.insert(name.to_owned(), feature);
    }
    serde_json::Value::Object(features)
}

/// A record: an Example (or SequenceExample) of some of the keys, or bytes as they come.
fn record(choices: &mut Choices<'_>, sequence: bool) -> Vec<u8> {
    let mut out = Vec::new();
    match choices.below(8) {
        0 => out.extend((0..choices.below(24)).map(|_| choices.byte())),
        _ if sequence => {
            length_delimited(&mut out, 1, &features_message(choices));
            let mut lists = Vec::new();
            for _ in 0..choices.below(4) {
                let mut list = Vec::new();
                for _ in 0..choices.below(4) {
                    length_delimited(&mut list, 1, &feature_message(choices));
                }
                map_entry(&mut lists, choices.pick(&KEYS), &list);
            }
            length_delimited(&mut out, 2, &lists);
        }
        _ => length_delimited(&mut out, 1, &features_message(choices)),
    }
    out
}

/// A `Features` message (also a SequenceExample's context).
fn features_message(choices: &mut Choices<'_>) -> Vec<u8> {
    let mut features = Vec::new();
    for _ in 0..choices.below(6) {
        let key = choices.pick(&KEYS);
        map_entry(&mut features, key, &feature_message(choices));
    }
    features
}

/// A `Feature`: an int64, float or bytes list of 0 to 6 values, or no list at all.
fn feature_message(choices: &mut Choices<'_>) -> Vec<u8> {
    const INTS: [i64; 8] = [0, 1, 2, 3, -1, 5, 1 << 40, i64::MIN];
    let count = choices.below(7);
    let mut list = Vec::new();
    let field = match choices.below(4) {
        0 => {
            let mut packed = Vec::new();
            (0..count).for_each(|_| varint(&mut packed, choices.pick(&INTS) as u64));
            length_delimited(&mut list, 1, &packed);
            3
        }
        1 => {
            let packed: Vec<u8> = (0..count).flat_map(|_| f32::from(choices.byte() as i8).to_le_bytes()).collect();
            length_delimited(&mut list, 1, &packed);
            2
        }
        2 => {
            (0..count).for_each(|_| length_delimited(&mut list, 1, &[choices.byte()]));
            1
        }
        _ => return Vec::new(),
    };
    let mut feature = Vec::new();
    length_delimited(&mut feature, field, &list);
    feature
}

fn map_entry(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    let mut entry = Vec::new();
    length_delimited(&mut entry, 1, key.as_bytes());
    length_delimited(&mut entry, 2, value);
    length_delimited(out, 1, &entry);
}

fn length_delimited(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    varint(out, field << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads `data` as a whole Parquet or Arrow IPC file, as a reader would: its schema types
/// the `columns` decoder (every column), its rows are read, decoded 16 at a time, and
/// indexed for the global shuffle. Returns the rows read before the end or the first
/// error (whether they decode or not: a null without a default does not). The columnar reader reads by ranges, so `data` goes to a temporary file first.
pub fn read_columnar(data: &[u8], format: crate::source::columnar::ColumnarFormat) -> usize {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("readerd-fuzz-{}-{n}", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return 0;
    }
    let rows = read_columnar_file(&crate::source::DataFile::local("fuzz", path.clone()), format);
    let _ = std::fs::remove_file(&path);
    rows
}

fn read_columnar_file(file: &crate::source::DataFile, format: crate::source::columnar::ColumnarFormat) -> usize {
    use crate::decode::columnar::ColumnarDecoder;
    use crate::source::columnar::{self, ColumnarConfig, ColumnarRecords, RecordsOf};
    let Ok(schema) = columnar::file_schema(file, format) else { return 0 };
    let Ok(decoder) = ColumnarDecoder::new(None).resolve(&schema) else { return 0 };
    let columns = decoder.columns().iter().map(|column| (column.name.clone(), column.ty.clone())).collect();
    let config = ColumnarConfig { format, records: RecordsOf::Rows(columns) };
    let _ = columnar::row_positions(file, &config);
    let Ok(mut records) = ColumnarRecords::open(file, &config, None) else { return 0 };
    let (mut read, mut rows) = (0, Vec::new());
    let decoder = Decoder::Columns(decoder);
    loop {
        let more = match records.next_record() {
            Ok(Some(record)) => {
                rows.push(record.value);
                true
            }
            Ok(None) | Err(_) => false,
        };
        if more && rows.len() < 16 {
            continue;
        }
        if !rows.is_empty() {
            let _ = decoder.decode_records(&rows, &[], true);
            read += rows.len();
        }
        rows.clear();
        if !more {
            return read;
        }
    }
}

/// Arbitrary bytes as an encoded image and the parameters of a transform (the
/// `image_transforms` target): `decodeImage` with any channels, then one operation with
/// parameters from the first bytes. Returns whether the chain succeeded; it must never
/// panic, nor allocate past the image limit (64K pixels here) or the transforms' own bounds.
pub fn transform_image(data: &[u8]) -> bool {
    use serde_json::json;
    let Some((params, image)) = data.split_first_chunk::<8>() else { return false };
    let p = |i: usize| i64::from(params[i]);
    let small = |i: usize| p(i) % 70 - 2;
    let fraction = |i: usize| p(i) as f64 / 200.0;
    let op = match params[0] % 20 {
        0 => {
            json!({"resize": {"feature": "image", "size": [small(2), small(3)], "method": (["BILINEAR", "NEAREST", "BICUBIC", "AREA"][params[4] as usize % 4])}})
        }
        1 => json!({"centralCrop": {"feature": "image", "fraction": fraction(2)}}),
        2 => json!({"resizeWithCropOrPad": {"feature": "image", "height": small(2), "width": small(3)}}),
        3 => json!({"randomCrop": {"feature": "image", "size": [small(2), small(3), small(4)]}}),
        4 => {
            json!({"randomResizedCrop": {"feature": "image", "size": [small(2), small(3)], "area": [fraction(4), fraction(5)], "aspectRatio": [fraction(6), fraction(7) * 4.0]}})
        }
        5 => {
            json!({"slice": {"feature": "image", "begin": [small(2), small(3), small(4)], "size": [small(5), small(6), small(7)]}})
        }
        6 => json!({"reshape": {"feature": "image", "shape": [small(2), -1]}}),
        7 => json!({"transpose": {"feature": "image", "perm": [p(2) % 4, p(3) % 4, p(4) % 4]}}),
        8 => {
            json!({"cast": {"feature": "image", "dtype": (["INT8", "FLOAT16", "BFLOAT16", "FLOAT64", "BOOL"][params[2] as usize % 5])}})
        }
        9 => {
            json!({"convertImageDtype": {"feature": "image", "dtype": (["FLOAT32", "INT32", "UINT16", "INT8"][params[2] as usize % 4]), "saturate": params[3] % 2 == 0}})
        }
        10 => json!({"perImageStandardization": {"feature": "image"}}),
        11 => json!({"randomBrightness": {"feature": "image", "maxDelta": fraction(2)}}),
        12 => json!({"randomContrast": {"feature": "image", "lower": fraction(2), "upper": fraction(3)}}),
        13 => {
            json!({"normalize": {"feature": "image", "mean": [fraction(2)], "std": [fraction(3), fraction(4), fraction(5)]}})
        }
        14 => json!({"randomFlipUpDown": {"feature": "image"}}),
        15 => json!({"scale": {"feature": "image", "multiply": fraction(2), "add": -fraction(3)}}),
        16 => json!({"decodeRaw": {"feature": "image", "outType": "INT32"}}),
        17 => json!({"adjustContrast": {"feature": "image", "factor": fraction(2)}}),
        18 => json!({"flipLeftRight": {"feature": "image"}}),
        _ => json!({"drop": {"features": ["image"]}}),
    };
    let decode = json!({"decodeImage": {"feature": "image", "channels": ([0, 1, 3, 4, 2][params[1] as usize % 5])}});
    // decodeRaw reads the encoded bytes; everything else the decoded image.
    let list = if params[0] % 20 == 16 { vec![op] } else { vec![decode, op] };
    let Ok(list) = list.into_iter().map(serde_json::from_value).collect::<Result<Vec<pb::Transform>, _>>() else {
        return false;
    };
    let Ok(mut transforms) = crate::spec::transforms::transforms_of(&list, u64::from(params[7])) else { return false };
    transforms.max_image_pixels = 1 << 16;
    let image = crate::decode::Dense::strings(vec![], vec![Bytes::copy_from_slice(image)]);
    let features = vec![("image".to_owned(), crate::decode::Tensor::Dense(image))];
    transforms.apply(features, 1, "fuzz:0").is_ok()
}
