//! The benchmark workloads (README, "Performance"; bench/README.md), written at a chosen size
//! (`readerctl gen-demo`), with a readerd spec for each. Deterministic for a seed.
//!
//! - **images**: `tf.train.Example`s with `image` (110,592 random bytes, 192×192×3),
//!   `label` int64 and `shape` int64×3, in 16 files;
//! - **tabular**: Criteo-like Examples, `label` int64, `i1`..`i13` float32 (heavy-tailed,
//!   quantised to 1/16 so the CSV text reads back as the same float32) and `c1`..`c26`
//!   int64 (32-bit hashed ids with Criteo's per-column cardinalities), in 8 files;
//! - **tabular_csv**: the same rows as CSV with a header line, same split;
//! - **tabular_parquet**: the same rows as Parquet (`crate::demo_parquet`), same split.
//!
//! The layout matches the tf.data benchmark harness's `gen_data.py` (bench/compare.sh):
//! `images/images-000-of-016.tfrecord`, `tabular/tabular-000-of-008.tfrecord`,
//! `tabular_csv/tabular-000-of-008.csv`; specs go to
//! `specs/<workload>.json`, with file names relative to the output directory (the data root).

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::Path;

use prost::Message;
use readerd_proto::tensorflow as tf;
use serde_json::{Value, json};

use crate::rng::SplitMix64;
use crate::tfrecord::TfRecordWriter;

pub const IMAGE_BYTES: usize = 192 * 192 * 3;
const IMAGE_FILES: usize = 16;
const TABULAR_FILES: usize = 8;
/// Criteo Kaggle's per-column cardinalities.
const CARDINALITIES: [u64; 26] = [
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27, 14992, 5461306, 10, 5652,
    2173, 4, 7046547, 18, 15, 286181, 105, 142572,
];

/// What to write.
#[derive(Clone, Debug)]
pub struct Sizes {
    pub images: usize,
    pub tabular: usize,
    pub seed: u64,
}

impl Default for Sizes {
    fn default() -> Self {
        Self { images: 2_400, tabular: 1_000_000, seed: 42 }
    }
}

/// The generator of one file of one workload.
fn file_rng(seed: u64, workload: u64, file: u64) -> SplitMix64 {
    let mut rng = SplitMix64 { state: seed ^ (workload << 48) ^ (file << 32) };
    rng.next_u64();
    rng
}

fn int64(values: Vec<i64>) -> tf::Feature {
    tf::Feature { kind: Some(tf::feature::Kind::Int64List(tf::Int64List { value: values })) }
}

fn float(values: Vec<f32>) -> tf::Feature {
    tf::Feature { kind: Some(tf::feature::Kind::FloatList(tf::FloatList { value: values })) }
}

fn example(features: BTreeMap<String, tf::Feature>) -> Vec<u8> {
    tf::Example { features: Some(tf::Features { feature: features }) }.encode_to_vec()
}

/// Records of file `index` of `files` when `total` records are split evenly.
fn share(total: usize, files: usize, index: usize) -> usize {
    total / files + usize::from(index < total % files)
}

/// Writes the images workload; calls `progress` with the records written so far.
pub fn write_images(out: &Path, sizes: &Sizes, progress: &mut dyn FnMut(u64)) -> std::io::Result<()> {
    let dir = out.join("images");
    std::fs::create_dir_all(&dir)?;
    let mut written = 0;
    for file in 0..IMAGE_FILES {
        let mut rng = file_rng(sizes.seed, 1, file as u64);
        let path = dir.join(format!("images-{file:03}-of-{IMAGE_FILES:03}.tfrecord"));
        let mut writer = TfRecordWriter::new(BufWriter::new(std::fs::File::create(path)?));
        let mut image = vec![0u8; IMAGE_BYTES];
        for _ in 0..share(sizes.images, IMAGE_FILES, file) {
            for chunk in image.chunks_mut(8) {
                let random = rng.next_u64().to_le_bytes();
                chunk.copy_from_slice(&random[..chunk.len()]);
            }
            let features = BTreeMap::from([
                (
                    "image".to_owned(),
                    tf::Feature {
                        kind: Some(tf::feature::Kind::BytesList(tf::BytesList { value: vec![image.clone().into()] })),
                    },
                ),
                ("label".to_owned(), int64(vec![(rng.next_u64() % 1000) as i64])),
                ("shape".to_owned(), int64(vec![192, 192, 3])),
            ]);
            writer.write_record(&example(features))?;
            written += 1;
            progress(written);
        }
        writer.finish()?;
    }
    Ok(())
}

/// One tabular row: label, 13 floats, 26 ids.
fn tabular_row(rng: &mut SplitMix64) -> (i64, [f32; 13], [i64; 26]) {
    let label = i64::from(rng.unit() < 0.256);
    let floats = std::array::from_fn(|_| {
        // Heavy-tailed (exponential of a uniform), quantised to 1/16: exact in float32 and in text.
        let value = (rng.unit() * 9.0).exp() - 1.0;
        ((value * 16.0).floor() / 16.0) as f32
    });
    let ids = std::array::from_fn(|column| {
        // Zipf-like: small ranks far more often; then hashed to 32 bits.
        let rank = (CARDINALITIES[column] as f64).powf(rng.unit().powi(3)) as u64;
        let mut hash = SplitMix64 { state: rank ^ ((column as u64) << 40) };
        (hash.next_u64() & 0xFFFF_FFFF) as i64
    });
    (label, floats, ids)
}

/// Which files of the tabular workload to write (the same rows in each).
#[derive(Clone, Copy, Debug, Default)]
pub struct TabularFormats {
    pub tfrecord: bool,
    pub csv: bool,
    pub parquet: bool,
}

/// Writes the tabular workload as TFRecords of Examples, CSV and/or Parquet (the same rows).
pub fn write_tabular(
    out: &Path,
    sizes: &Sizes,
    formats: TabularFormats,
    progress: &mut dyn FnMut(u64),
) -> std::io::Result<()> {
    let TabularFormats { tfrecord, csv, parquet } = formats;
    let (tf_dir, csv_dir, parquet_dir) = (out.join("tabular"), out.join("tabular_csv"), out.join("tabular_parquet"));
    for (wanted, dir) in [(tfrecord, &tf_dir), (csv, &csv_dir), (parquet, &parquet_dir)] {
        if wanted {
            std::fs::create_dir_all(dir)?;
        }
    }
    let mut written = 0;
    for file in 0..TABULAR_FILES {
        let mut rng = file_rng(sizes.seed, 2, file as u64);
        let name = format!("tabular-{file:03}-of-{TABULAR_FILES:03}");
        let mut records = match tfrecord {
            true => Some(TfRecordWriter::new(BufWriter::new(std::fs::File::create(
                tf_dir.join(format!("{name}.tfrecord")),
            )?))),
            false => None,
        };
        let mut lines = match csv {
            true => Some(BufWriter::new(std::fs::File::create(csv_dir.join(format!("{name}.csv")))?)),
            false => None,
        };
        if let Some(lines) = &mut lines {
            writeln!(lines, "{}", tabular_columns().join(","))?;
        }
        let mut columns = match parquet {
            true => Some(crate::demo_parquet::TabularParquet::create(&parquet_dir.join(format!("{name}.parquet")))?),
            false => None,
        };
        for _ in 0..share(sizes.tabular, TABULAR_FILES, file) {
            let (label, floats, ids) = tabular_row(&mut rng);
            if let Some(records) = &mut records {
                let mut features = BTreeMap::from([("label".to_owned(), int64(vec![label]))]);
                features.extend(floats.iter().enumerate().map(|(i, &v)| (format!("i{}", i + 1), float(vec![v]))));
                features.extend(ids.iter().enumerate().map(|(i, &v)| (format!("c{}", i + 1), int64(vec![v]))));
                records.write_record(&example(features))?;
            }
            if let Some(lines) = &mut lines {
                write!(lines, "{label}")?;
                for value in floats {
                    write!(lines, ",{value}")?;
                }
                for id in ids {
                    write!(lines, ",{id}")?;
                }
                writeln!(lines)?;
            }
            if let Some(columns) = &mut columns {
                columns.push(label, &floats, &ids)?;
            }
            written += 1;
            progress(written);
        }
        if let Some(records) = records {
            records.finish()?;
        }
        if let Some(mut lines) = lines {
            lines.flush()?;
        }
        if let Some(columns) = columns {
            columns.finish()?;
        }
    }
    Ok(())
}

/// `label,i1..i13,c1..c26`.
pub fn tabular_columns() -> Vec<String> {
    let mut columns = vec!["label".to_owned()];
    columns.extend((1..=13).map(|i| format!("i{i}")));
    columns.extend((1..=26).map(|i| format!("c{i}")));
    columns
}

fn fixed(dtype: &str, shape: &[i64]) -> Value {
    json!({"fixedLen": {"dtype": dtype, "shape": shape}})
}

/// The readerd spec of a workload, files relative to the output directory.
pub fn spec(workload: &str, batch_size: u32, epochs: i32) -> Option<Value> {
    // As tfdata-bench's pipeline: two files read at once, batches of `batch_size`.
    let pipeline = json!({"batchSize": batch_size, "cycleLength": 2, "prefetch": 4, "numEpochs": epochs});
    Some(match workload {
        "images" => json!({
            "source": {"files": ["images/images-*.tfrecord"], "format": "TFRECORD"},
            "decoder": {"example": {"features": {
                "image": fixed("STRING", &[]), "label": fixed("INT64", &[]), "shape": fixed("INT64", &[3])}}},
            "pipeline": pipeline,
        }),
        "tabular" => {
            let mut features = serde_json::Map::new();
            features.insert("label".into(), fixed("INT64", &[]));
            for i in 1..=13 {
                features.insert(format!("i{i}"), fixed("FLOAT32", &[]));
            }
            for i in 1..=26 {
                features.insert(format!("c{i}"), fixed("INT64", &[]));
            }
            json!({
                "source": {"files": ["tabular/tabular-*.tfrecord"], "format": "TFRECORD"},
                "decoder": {"example": {"features": features}},
                "pipeline": pipeline,
            })
        }
        "tabular_csv" => {
            let columns: Vec<Value> = tabular_columns()
                .into_iter()
                .map(|name| {
                    let dtype = if name.starts_with('i') { "FLOAT32" } else { "INT64" };
                    json!({"name": name, "dtype": dtype})
                })
                .collect();
            json!({
                "source": {"files": ["tabular_csv/tabular-*.csv"], "format": "CSV", "header": true},
                "decoder": {"csv": {"columns": columns}},
                "pipeline": pipeline,
            })
        }
        "tabular_parquet" => {
            let columns: Vec<Value> = tabular_columns().into_iter().map(|name| json!({"name": name})).collect();
            json!({
                "source": {"files": ["tabular_parquet/tabular-*.parquet"], "format": "PARQUET"},
                "decoder": {"columns": {"columns": columns}},
                "pipeline": pipeline,
            })
        }
        // tabular and tabular_csv (the same rows) sampled half and half: what a mixture
        // costs over its components read alone.
        "tabular_mix" => {
            let component = |workload: &str| {
                let mut spec = spec(workload, 0, epochs)?;
                spec["pipeline"] = json!({"cycleLength": 2, "numEpochs": epochs});
                Some(spec)
            };
            json!({
                "mix": {"datasets": [component("tabular")?, component("tabular_csv")?], "weights": [1, 1]},
                "pipeline": {"batchSize": batch_size, "prefetch": 4, "seed": 1},
            })
        }
        // tabular's files in two halves, mixed half and half: components that decode alike
        // (their batches decode as one), against tabular read alone. Each half reads one
        // file at a time, so that the mixture reads two at once, as tabular does.
        "tabular_halves" => {
            let half = |files: &str| {
                let mut spec = spec("tabular", 0, epochs)?;
                spec["source"]["files"] = json!([files]);
                spec["pipeline"] = json!({"cycleLength": 1, "numEpochs": epochs});
                Some(spec)
            };
            json!({
                "mix": {"datasets": [half("tabular/tabular-00[0-3]-*.tfrecord")?,
                                     half("tabular/tabular-00[4-7]-*.tfrecord")?],
                        "weights": [1, 1]},
                "pipeline": {"batchSize": batch_size, "prefetch": 4, "seed": 1},
            })
        }
        _ => return None,
    })
}

/// Workloads whose specs read the files of others (written with them).
pub const MIXED_WORKLOADS: [(&str, &[&str]); 2] =
    [("tabular_mix", &["tabular", "tabular_csv"]), ("tabular_halves", &["tabular"])];

pub const WORKLOADS: [&str; 4] = ["images", "tabular", "tabular_csv", "tabular_parquet"];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tfrecord::TfRecordReader;

    #[test]
    fn tabular_csv_holds_the_rows_of_the_tfrecords() {
        let dir = tempfile::tempdir().unwrap();
        let sizes = Sizes { images: 0, tabular: 20, seed: 7 };
        write_tabular(dir.path(), &sizes, TabularFormats { tfrecord: true, csv: true, parquet: false }, &mut |_| {})
            .unwrap();
        let path = dir.path().join("tabular/tabular-000-of-008.tfrecord");
        let bytes = std::fs::read(path).unwrap();
        let mut reader = TfRecordReader::new(bytes.as_slice(), bytes.len() as u64);
        let csv = std::fs::read_to_string(dir.path().join("tabular_csv/tabular-000-of-008.csv")).unwrap();
        let mut lines = csv.lines();
        assert_eq!(lines.next().unwrap(), tabular_columns().join(","));
        let mut rows = 0;
        while let Some((_, record)) = reader.next_record().unwrap() {
            let example = tf::Example::decode(record.as_slice()).unwrap();
            let features = example.features.unwrap().feature;
            let fields: Vec<&str> = lines.next().unwrap().split(',').collect();
            for (name, field) in tabular_columns().iter().zip(&fields) {
                match features[name].kind.as_ref().unwrap() {
                    tf::feature::Kind::FloatList(list) => assert_eq!(list.value[0], field.parse::<f32>().unwrap()),
                    tf::feature::Kind::Int64List(list) => assert_eq!(list.value[0], field.parse::<i64>().unwrap()),
                    other => panic!("unexpected {other:?}"),
                }
            }
            rows += 1;
        }
        assert_eq!(rows, 3, "20 rows over 8 files: the first files get 3");
        assert!(lines.next().is_none());
    }

    #[test]
    fn the_same_seed_writes_the_same_bytes() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let sizes = Sizes { images: 3, tabular: 9, seed: 1 };
        for dir in [&a, &b] {
            write_images(dir.path(), &sizes, &mut |_| {}).unwrap();
            write_tabular(dir.path(), &sizes, TabularFormats { tfrecord: true, ..Default::default() }, &mut |_| {})
                .unwrap();
        }
        for file in ["images/images-000-of-016.tfrecord", "tabular/tabular-000-of-008.tfrecord"] {
            assert_eq!(std::fs::read(a.path().join(file)).unwrap(), std::fs::read(b.path().join(file)).unwrap());
        }
    }
}
