//! CSV → TFRecord of `tf.train.Example` (`readerctl convert`), the conversion TensorFlow's
//! guides recommend before training. The first line names the columns. Each column's type
//! is given (`name:int64`, `name:float`, `name:bytes`) or inferred: int64 when every
//! non-empty field is an integer, float when every one is a number, bytes otherwise. An
//! empty field leaves the feature out of that Example (TensorFlow's missing feature).
//! The readerd spec that reads the result back is returned alongside.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use prost::Message;
use readerd_proto::tensorflow as tf;
use serde_json::{Value, json};

use crate::tfrecord::TfRecordWriter;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    Int64,
    Float,
    Bytes,
}

impl ColumnType {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "int64" | "int" => Some(ColumnType::Int64),
            "float" | "float32" => Some(ColumnType::Float),
            "bytes" | "string" => Some(ColumnType::Bytes),
            _ => None,
        }
    }

    fn dtype(self) -> &'static str {
        match self {
            ColumnType::Int64 => "INT64",
            ColumnType::Float => "FLOAT32",
            ColumnType::Bytes => "STRING",
        }
    }

    /// The narrowest type that holds both.
    fn widen(self, field: &str) -> Self {
        match self {
            _ if field.is_empty() => self,
            ColumnType::Int64 if field.parse::<i64>().is_ok() => ColumnType::Int64,
            ColumnType::Int64 | ColumnType::Float if field.parse::<f32>().is_ok() => ColumnType::Float,
            _ => ColumnType::Bytes,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("line {line}: {source}")]
    Csv { line: u64, source: csv::Error },
    #[error("{0}")]
    Schema(String),
    #[error("line {line}, column {column}: {field:?} is not {expected}")]
    Field { line: u64, column: String, field: String, expected: &'static str },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// What a conversion did.
#[derive(Debug)]
pub struct Converted {
    pub columns: Vec<(String, ColumnType)>,
    pub records: u64,
    /// The readerd spec (proto3 JSON) that reads the output, as `file_name` under a data root.
    pub spec: Value,
}

/// `name:type,...` → the given types.
pub fn parse_schema(text: &str) -> Result<BTreeMap<String, ColumnType>, ConvertError> {
    text.split(',')
        .filter(|part| !part.trim().is_empty())
        .map(|part| {
            let (name, kind) =
                part.split_once(':').ok_or_else(|| ConvertError::Schema(format!("{part:?}: expected name:type")))?;
            let kind = ColumnType::parse(kind.trim())
                .ok_or_else(|| ConvertError::Schema(format!("{part:?}: types are int64, float and bytes")))?;
            Ok((name.trim().to_owned(), kind))
        })
        .collect()
}

fn line_of(position: Option<&csv::Position>) -> u64 {
    position.map_or(0, |p| p.line())
}

/// Converts the CSV `input` (read twice when types are inferred: `reopen` gives it again)
/// to `output`, calling `progress` with the records written.
pub fn csv_to_tfrecord<R: Read, W: Write>(
    mut reopen: impl FnMut() -> std::io::Result<R>,
    output: W,
    given: &BTreeMap<String, ColumnType>,
    file_name: &str,
    progress: &mut dyn FnMut(u64),
) -> Result<Converted, ConvertError> {
    let mut reader = csv::ReaderBuilder::new().has_headers(true).flexible(false).from_reader(reopen()?);
    let header: Vec<String> =
        reader.headers().map_err(|source| ConvertError::Csv { line: 1, source })?.iter().map(str::to_owned).collect();
    if let Some(unknown) = given.keys().find(|name| !header.contains(name)) {
        return Err(ConvertError::Schema(format!("column {unknown:?} is not in the header {header:?}")));
    }
    let mut types: Vec<Option<ColumnType>> = header.iter().map(|name| given.get(name).copied()).collect();
    if types.iter().any(Option::is_none) {
        let mut inferred = vec![ColumnType::Int64; header.len()];
        let mut seen = vec![false; header.len()];
        for row in reader.records() {
            let row = row.map_err(|source| ConvertError::Csv { line: line_of(source.position()), source })?;
            for (column, field) in row.iter().enumerate() {
                inferred[column] = inferred[column].widen(field);
                seen[column] |= !field.is_empty();
            }
        }
        for (column, kind) in types.iter_mut().enumerate() {
            // A column with no value at all is bytes: nothing says otherwise.
            kind.get_or_insert(if seen[column] { inferred[column] } else { ColumnType::Bytes });
        }
        reader = csv::ReaderBuilder::new().has_headers(true).from_reader(reopen()?);
    }
    let types: Vec<ColumnType> = types.into_iter().map(|kind| kind.unwrap_or(ColumnType::Bytes)).collect();
    let mut writer = TfRecordWriter::new(output);
    let mut records = 0;
    // Columns with an empty field somewhere: those are missing features there.
    let mut gaps = vec![false; header.len()];
    let mut row = csv::StringRecord::new();
    loop {
        match reader.read_record(&mut row) {
            Ok(true) => {}
            Ok(false) => break,
            Err(source) => return Err(ConvertError::Csv { line: line_of(source.position()), source }),
        }
        let line = line_of(row.position());
        let mut features = BTreeMap::new();
        for (column, ((name, kind), field)) in header.iter().zip(&types).zip(row.iter()).enumerate() {
            if field.is_empty() {
                gaps[column] = true;
                continue;
            }
            let bad = |expected| ConvertError::Field { line, column: name.clone(), field: field.to_owned(), expected };
            let value = match kind {
                ColumnType::Int64 => tf::feature::Kind::Int64List(tf::Int64List {
                    value: vec![field.parse().map_err(|_| bad("an int64"))?],
                }),
                ColumnType::Float => tf::feature::Kind::FloatList(tf::FloatList {
                    value: vec![field.parse().map_err(|_| bad("a float"))?],
                }),
                ColumnType::Bytes => tf::feature::Kind::BytesList(tf::BytesList {
                    value: vec![bytes::Bytes::copy_from_slice(field.as_bytes())],
                }),
            };
            features.insert(name.clone(), tf::Feature { kind: Some(value) });
        }
        let example = tf::Example { features: Some(tf::Features { feature: features }) };
        writer.write_record(&example.encode_to_vec())?;
        records += 1;
        progress(records);
    }
    writer.finish()?;
    let columns: Vec<(String, ColumnType)> = header.into_iter().zip(types).collect();
    // A column every row fills is a scalar (`fixedLen`, shape []), as a CSV column is; one
    // with gaps is `varLen` (a missing value is no value, not a default the data never had).
    let features: serde_json::Map<String, Value> = columns
        .iter()
        .zip(&gaps)
        .map(|((name, kind), &gap)| {
            let feature = match gap || records == 0 {
                true => json!({"varLen": {"dtype": kind.dtype()}}),
                false => json!({"fixedLen": {"dtype": kind.dtype(), "shape": []}}),
            };
            (name.clone(), feature)
        })
        .collect();
    let spec = json!({
        "source": {"files": [file_name], "format": "TFRECORD"},
        "decoder": {"example": {"features": features}},
    });
    Ok(Converted { columns, records, spec })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tfrecord::TfRecordReader;

    fn convert(csv: &str, schema: &str) -> Result<(Converted, Vec<tf::Example>), ConvertError> {
        let mut out = Vec::new();
        let given = parse_schema(schema)?;
        let converted = csv_to_tfrecord(|| Ok(csv.as_bytes()), &mut out, &given, "out.tfrecord", &mut |_| {})?;
        let mut reader = TfRecordReader::new(out.as_slice(), out.len() as u64);
        let mut examples = Vec::new();
        while let Some((_, record)) = reader.next_record().unwrap() {
            examples.push(tf::Example::decode(record.as_slice()).unwrap());
        }
        Ok((converted, examples))
    }

    #[test]
    fn types_are_inferred_and_empty_fields_are_missing_features() {
        let (converted, examples) = convert("id,price,name\n1,2.5,a\n2,,b\n3,4,\n", "").unwrap();
        let kinds: Vec<ColumnType> = converted.columns.iter().map(|(_, kind)| *kind).collect();
        assert_eq!(kinds, [ColumnType::Int64, ColumnType::Float, ColumnType::Bytes]);
        assert_eq!(converted.records, 3);
        let second = &examples[1].features.as_ref().unwrap().feature;
        assert!(!second.contains_key("price"), "empty field: missing feature");
        assert_eq!(third_price(&examples[2]), Some(4.0), "an integer in a float column is a float");
        assert_eq!(
            converted.spec["decoder"]["example"]["features"]["price"]["varLen"]["dtype"], "FLOAT32",
            "it has a gap"
        );
        let id = &converted.spec["decoder"]["example"]["features"]["id"];
        assert_eq!(*id, json!({"fixedLen": {"dtype": "INT64", "shape": []}}), "filled in every row: a scalar");
    }

    fn third_price(example: &tf::Example) -> Option<f32> {
        match example.features.as_ref()?.feature.get("price")?.kind.as_ref()? {
            tf::feature::Kind::FloatList(list) => list.value.first().copied(),
            _ => None,
        }
    }

    #[test]
    fn a_given_type_is_checked_and_the_error_names_line_and_column() {
        let err = convert("id,price\n1,2\nx,3\n", "id:int64").unwrap_err();
        assert_eq!(err.to_string(), "line 3, column id: \"x\" is not an int64");
        let err = convert("id\n1\n", "nope:int64").unwrap_err();
        assert!(err.to_string().contains("\"nope\" is not in the header"), "{err}");
        assert!(parse_schema("id:int32").is_err());
    }
}
