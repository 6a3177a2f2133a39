//! The input pipeline: deterministic order whatever the thread timing, TensorFlow's
//! interleave order, every record once per epoch (with shuffling and sharding), epochs
//! kept apart, and a shuffle buffer that shuffles as much as its size allows.

use readerd_server::pipeline::global::IndexDir;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use readerd_server::format::FormatConfig;
use readerd_server::pipeline::cache::RecordCache;
use readerd_server::pipeline::shuffle::ShuffleConfig;
use readerd_server::pipeline::{Next, PipelineConfig, PipelineEnv, RecordPipeline, Shard};
use readerd_server::source::{DataFile, DataRoots, SourceConfig};

/// Text files `f<i>.txt` of different lengths (some gzipped, so reading speeds differ);
/// line `j` of file `i` is `i:j`.
fn write_files(dir: &std::path::Path, lengths: &[usize]) -> Arc<[DataFile]> {
    write_files_gzipping(dir, lengths, true)
}

fn write_files_gzipping(dir: &std::path::Path, lengths: &[usize], gzip_some: bool) -> Arc<[DataFile]> {
    for (i, &lines) in lengths.iter().enumerate() {
        let text: String = (0..lines).map(|j| format!("{i}:{j}\n")).collect();
        if gzip_some && i % 3 == 1 {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            gz.write_all(text.as_bytes()).unwrap();
            std::fs::write(dir.join(format!("f{i}.txt.gz")), gz.finish().unwrap()).unwrap();
        } else {
            std::fs::write(dir.join(format!("f{i}.txt")), text).unwrap();
        }
    }
    let roots = DataRoots::new(&[dir.to_path_buf()]).unwrap();
    let mut files = Vec::new();
    for i in 0..lengths.len() {
        files.extend(roots.resolve(&format!("f{i}.txt*")).unwrap());
    }
    files.into()
}

fn source() -> Arc<SourceConfig> {
    Arc::new(SourceConfig {
        format: FormatConfig::TextLine { skip_header_lines: 0 }.into(),
        compression: None,
        max_record_bytes: 1 << 20,
    })
}

/// The whole sequence, epochs as separate lists.
fn run(files: &Arc<[DataFile]>, config: &PipelineConfig) -> Vec<Vec<String>> {
    epochs_of(RecordPipeline::new(files.clone(), source(), config.clone(), PipelineEnv::default()))
}

/// A pipeline's steps with the epochs as separate lists.
fn epochs_of(mut pipeline: RecordPipeline) -> Vec<Vec<String>> {
    let mut epochs = vec![Vec::new()];
    for step in steps(&mut pipeline, usize::MAX) {
        match step.as_str() {
            "<epoch>" => epochs.push(Vec::new()),
            _ => epochs.last_mut().unwrap().push(step),
        }
    }
    epochs
}

fn all_records(lengths: &[usize]) -> Vec<String> {
    let mut all: Vec<String> =
        lengths.iter().enumerate().flat_map(|(i, &n)| (0..n).map(move |j| format!("{i}:{j}"))).collect();
    all.sort();
    all
}

fn sorted(mut records: Vec<String>) -> Vec<String> {
    records.sort();
    records
}

/// TensorFlow's deterministic interleave, written out sequentially as the reference.
fn reference_interleave(lengths: &[usize], order: &[usize], cycle: usize, block: usize) -> Vec<String> {
    let mut slots: Vec<Option<(usize, usize)>> = vec![None; cycle];
    let (mut next_input, mut index, mut in_block) = (0, 0, 0);
    let mut out = Vec::new();
    loop {
        match slots[index] {
            Some((file, line)) if line < lengths[file] => {
                out.push(format!("{file}:{line}"));
                slots[index] = Some((file, line + 1));
                in_block += 1;
                if in_block == block {
                    in_block = 0;
                    index = (index + 1) % cycle;
                }
            }
            Some(_) => {
                slots[index] = None;
                in_block = 0;
                index = (index + 1) % cycle;
            }
            None if next_input < order.len() => {
                slots[index] = Some((order[next_input], 0));
                next_input += 1;
            }
            None if slots.iter().all(Option::is_none) => return out,
            None => {
                in_block = 0;
                index = (index + 1) % cycle;
            }
        }
    }
}

const LENGTHS: &[usize] = &[40, 7, 0, 25, 60, 3, 18, 33];

#[test]
fn interleave_follows_tensorflow_and_is_the_same_whatever_the_timing() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), LENGTHS);
    for (cycle, block) in [(1, 1), (3, 2), (4, 5), (8, 1), (16, 3)] {
        let config = PipelineConfig { cycle_length: cycle, block_length: block, ..PipelineConfig::default() };
        let order: Vec<usize> = (0..LENGTHS.len()).collect();
        let expected = reference_interleave(LENGTHS, &order, cycle, block);
        for _ in 0..20 {
            assert_eq!(run(&files, &config), vec![expected.clone()], "cycle {cycle} block {block}");
        }
    }
}

#[test]
fn shuffled_runs_repeat_exactly_and_cover_every_record_once_per_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), LENGTHS);
    let config = PipelineConfig {
        seed: 7,
        shuffle_files: true,
        cycle_length: 3,
        block_length: 2,
        shuffle: Some(ShuffleConfig { capacity: 50, min_after_dequeue: 20 }),
        num_epochs: Some(3),
        ..PipelineConfig::default()
    };
    let first = run(&files, &config);
    assert_eq!(first.len(), 3, "three epochs, kept apart");
    for epoch in &first {
        assert_eq!(sorted(epoch.clone()), all_records(LENGTHS), "each epoch holds every record once");
    }
    assert_ne!(first[0], first[1], "each epoch is shuffled anew");
    for _ in 0..20 {
        assert_eq!(run(&files, &config), first);
    }
    let other_seed = run(&files, &PipelineConfig { seed: 8, ..config.clone() });
    assert_ne!(other_seed, first);
}

#[test]
fn shards_partition_every_epoch_by_file_or_by_record() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), LENGTHS);
    // 3 shards over 8 files: by file; 12 shards over 8 files: by record.
    for count in [3, 12] {
        let mut union = Vec::new();
        let mut by_shard = BTreeMap::new();
        for index in 0..count {
            let config = PipelineConfig {
                seed: 3,
                shuffle_files: true,
                shard: Some(Shard { count, index }),
                cycle_length: 2,
                shuffle: Some(ShuffleConfig { capacity: 10, min_after_dequeue: 9 }),
                ..PipelineConfig::default()
            };
            let records = run(&files, &config).concat();
            by_shard.insert(index, records.len());
            union.extend(records);
        }
        assert_eq!(sorted(union), all_records(LENGTHS), "{count} shards: the union is exact, no overlap");
        assert!(by_shard.values().filter(|&&n| n > 0).count() > 1, "{count} shards share the work: {by_shard:?}");
    }
}

#[test]
fn buffer_shuffle_displaces_records_as_far_as_its_size_allows() {
    let dir = tempfile::tempdir().unwrap();
    let lengths = [5000];
    let files = write_files(dir.path(), &lengths);
    for capacity in [10usize, 100, 1000] {
        let config = PipelineConfig {
            seed: 11,
            shuffle: Some(ShuffleConfig { capacity, min_after_dequeue: capacity - 1 }),
            ..PipelineConfig::default()
        };
        let out = run(&files, &config).concat();
        assert_eq!(out.len(), 5000);
        let mut total = 0f64;
        for (position, record) in out.iter().enumerate() {
            let input: usize = record.split(':').nth(1).unwrap().parse().unwrap();
            // A record cannot leave before it entered: at most capacity - 1 places early.
            assert!(position + capacity > input, "record {input} left at {position} with capacity {capacity}");
            total += (position as f64 - input as f64).abs();
        }
        let mean = total / out.len() as f64;
        // A record waits a geometric time with mean `capacity` in the buffer; the drain at
        // the end adds a little. The mean displacement grows with the buffer.
        assert!(mean > capacity as f64 * 0.5 && mean < capacity as f64 * 2.0, "capacity {capacity}: mean {mean}");
    }
}

fn global(seed: u64, epochs: u64) -> PipelineConfig {
    PipelineConfig { seed, global_shuffle: true, num_epochs: Some(epochs), ..PipelineConfig::default() }
}

#[test]
fn global_shuffle_is_a_uniform_permutation_of_each_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let lengths = [3000, 0, 1000, 1000];
    let files = write_files_gzipping(dir.path(), &lengths, false);
    let index_dir = dir.path().join("index");
    let env =
        PipelineEnv { index_store: Some(std::sync::Arc::new(IndexDir(index_dir.clone()))), ..PipelineEnv::default() };
    let run_global =
        |config: &PipelineConfig| epochs_of(RecordPipeline::new(files.clone(), source(), config.clone(), env.clone()));
    let epochs = run_global(&global(9, 2));
    assert_eq!(epochs.len(), 2);
    for epoch in &epochs {
        assert_eq!(sorted(epoch.clone()), all_records(&lengths));
    }
    assert_ne!(epochs[0], epochs[1]);
    assert_eq!(run_global(&global(9, 2)), epochs, "the same seed, the same permutations");
    assert_eq!(std::fs::read_dir(&index_dir).unwrap().count(), 4, "one cached index per file");

    // Displacement of a uniform permutation of n: E|i - π(i)| = (n² - 1) / 3n ≈ n / 3.
    let input: Vec<String> = (0..4).flat_map(|f| (0..lengths[f]).map(move |j| format!("{f}:{j}"))).collect();
    let position_in_input: BTreeMap<&str, usize> = input.iter().enumerate().map(|(i, r)| (r.as_str(), i)).collect();
    let n = input.len() as f64;
    let mean =
        epochs[0].iter().enumerate().map(|(i, r)| (i as f64 - position_in_input[r.as_str()] as f64).abs()).sum::<f64>()
            / n;
    assert!((mean - n / 3.0).abs() < n * 0.03, "mean displacement {mean} for n = {n}");

    // A changed file is indexed again.
    std::fs::write(dir.path().join("f2.txt"), "changed\n").unwrap();
    let changed = run_global(&global(9, 1));
    assert_eq!(changed[0].len(), 3000 + 1 + 1000);
    assert!(changed[0].contains(&"changed".to_owned()));
}

#[test]
fn global_shuffle_reads_every_format_at_its_indexed_positions() {
    use readerd_server::format::fixed_length::FixedLengthConfig;
    let golden = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/golden");
    let golden = std::env::var_os("READERD_GOLDEN_DIR").map(PathBuf::from).unwrap_or(golden);
    let roots = DataRoots::new(&[golden]).unwrap();
    let fixed = |hop| FixedLengthConfig { header_bytes: 5, record_bytes: 4, footer_bytes: 3, hop_bytes: hop };
    let cases = [
        ("tfrecord/*.tfrecord", FormatConfig::TfRecord),
        ("text/lf.txt", FormatConfig::TextLine { skip_header_lines: 2 }),
        ("fixed_length/hdr_ftr.bin", FormatConfig::FixedLength(fixed(None))),
        ("fixed_length/hdr_ftr.bin", FormatConfig::FixedLength(fixed(Some(6)))),
        ("fixed_length/hdr_ftr.bin", FormatConfig::FixedLength(fixed(Some(3)))),
    ];
    for (pattern, format) in cases {
        let files: Arc<[DataFile]> = roots
            .resolve(pattern)
            .unwrap()
            .into_iter()
            .filter(|f| !f.name.contains("corrupt") && !f.name.contains("empty"))
            .collect::<Vec<_>>()
            .into();
        let source =
            Arc::new(SourceConfig { format: format.clone().into(), compression: None, max_record_bytes: 1 << 30 });
        let collect = |config: PipelineConfig| {
            let mut pipeline = RecordPipeline::new(files.clone(), source.clone(), config, PipelineEnv::default());
            let mut out = Vec::new();
            while let Next::Item(record) = pipeline.next_step().unwrap() {
                out.push((record.key_string(), record.value.as_bytes().unwrap().to_vec()));
            }
            out.sort();
            out
        };
        let sequential = collect(PipelineConfig::default());
        assert!(!sequential.is_empty());
        assert_eq!(collect(global(1, 1)), sequential, "{pattern} {format:?}");
    }
}

/// Every step (records and epoch boundaries) of a pipeline, from `pipeline` on.
fn steps(pipeline: &mut RecordPipeline, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < limit {
        match pipeline.next_step().unwrap() {
            Next::Item(r) => out.push(String::from_utf8(r.value.as_bytes().unwrap().to_vec()).unwrap()),
            Next::EndOfEpoch => out.push("<epoch>".into()),
            Next::End => break,
        }
    }
    out
}

#[test]
fn a_restored_state_continues_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let gz_files = write_files(dir.path(), LENGTHS);
    let plain_dir = tempfile::tempdir().unwrap();
    let plain_files = write_files_gzipping(plain_dir.path(), LENGTHS, false);
    let buffered = PipelineConfig {
        seed: 21,
        shuffle_files: true,
        cycle_length: 3,
        block_length: 2,
        shuffle: Some(ShuffleConfig { capacity: 50, min_after_dequeue: 20 }),
        num_epochs: Some(3),
        ..PipelineConfig::default()
    };
    let cases = [
        ("interleave + buffer, gzip among the files", gz_files.clone(), buffered.clone()),
        (
            "sharded by record",
            gz_files.clone(),
            PipelineConfig { shard: Some(Shard { count: 12, index: 5 }), ..buffered.clone() },
        ),
        ("global shuffle", plain_files.clone(), global(4, 2)),
    ];
    for (name, files, config) in cases {
        let full = steps(
            &mut RecordPipeline::new(files.clone(), source(), config.clone(), PipelineEnv::default()),
            usize::MAX,
        );
        for cut in [0, 1, 17, 30, 99, 186, 187, 188, full.len() - 1, full.len()] {
            let mut first = RecordPipeline::new(files.clone(), source(), config.clone(), PipelineEnv::default());
            let mut seen = steps(&mut first, cut);
            let state = first.state();
            drop(first);
            let mut resumed =
                RecordPipeline::restore(files.clone(), source(), config.clone(), PipelineEnv::default(), &state)
                    .unwrap();
            seen.extend(steps(&mut resumed, usize::MAX));
            assert_eq!(seen, full, "{name}: resumed after {cut} steps");
        }
    }
}

#[test]
fn cached_files_are_read_from_memory_in_later_epochs_with_the_same_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_files(dir.path(), LENGTHS);
    let config = PipelineConfig {
        seed: 2,
        shuffle_files: true,
        cycle_length: 3,
        shuffle: Some(ShuffleConfig { capacity: 30, min_after_dequeue: 29 }),
        num_epochs: Some(3),
        ..PipelineConfig::default()
    };
    let uncached = run(&files, &config);
    let cache = RecordCache::new(1 << 20);
    let env = PipelineEnv { cache: cache.clone(), ..PipelineEnv::default() };
    let mut pipeline = RecordPipeline::new(files.clone(), source(), config.clone(), env.clone());
    let cached = steps(&mut pipeline, usize::MAX);
    let expected: Vec<String> = uncached.join(&"<epoch>".to_owned());
    assert_eq!(cached, expected);
    assert_eq!(cache.hits(), 2 * LENGTHS.len() as u64, "epochs 2 and 3 read every file from memory");
    // Another reader over the same files shares the cache from its first epoch.
    let mut other = RecordPipeline::new(files.clone(), source(), config, env);
    assert_eq!(steps(&mut other, usize::MAX), expected);
    assert_eq!(cache.hits(), 5 * LENGTHS.len() as u64);

    // A budget too small for a file keeps it on disk.
    let small = RecordCache::new(50);
    let env = PipelineEnv { cache: small.clone(), ..PipelineEnv::default() };
    let mut pipeline = RecordPipeline::new(files.clone(), source(), global_free(), env);
    steps(&mut pipeline, usize::MAX);
    assert!(small.used_bytes() <= 50);
}

fn global_free() -> PipelineConfig {
    PipelineConfig { num_epochs: Some(2), ..PipelineConfig::default() }
}
