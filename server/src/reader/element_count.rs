//! How many elements a spec gives, where its files say so before reading: the rows in
//! Parquet and Arrow IPC footers, the records of uncompressed fixed-length files from
//! their sizes. Then the spec's shard, epochs and batching, as the pipeline applies them
//! (batches end at each epoch's end). `DescribeSpec` gives it, as tf.data's
//! `cardinality` does: a count, endless, or unknown.
//!
//! Unknown where counting would mean reading the records: TFRecord, text and CSV files,
//! compressed files, the classic reader's hops, a selection (key buckets, predicates,
//! skip/take), unbatching, skipped errors, mixtures; and columnar sources of more than
//! [`MAX_FOOTERS`] files.

use crate::error::Result;
use crate::format::FormatConfig;
use crate::source::columnar::unit_starts;
use crate::source::{Compression, DataFile, SourceFormat};
use crate::spec::ReaderSpec;

/// The most columnar files whose footers are read to count rows (one ranged read each;
/// on an object store, a request each): past it the count is [`UNKNOWN`], so that
/// describing a spec of many thousand objects stays quick.
pub const MAX_FOOTERS: usize = 256;

/// tf.data's `cardinality`: `INFINITE_CARDINALITY`.
pub const ENDLESS: i64 = -1;
/// tf.data's `cardinality`: `UNKNOWN_CARDINALITY`.
pub const UNKNOWN: i64 = -2;

/// The elements `spec` gives, reading its `files` (`reader::files_of`): a count, [`ENDLESS`]
/// or [`UNKNOWN`] (blocking: reads file sizes and columnar footers).
pub fn element_count(spec: &ReaderSpec, files: &[DataFile]) -> Result<i64> {
    let selects = !spec.select.is_empty();
    if spec.mix.is_some() || spec.unbatch || spec.skip_errors || selects {
        return Ok(UNKNOWN);
    }
    let Some(epochs) = spec.pipeline.num_epochs else { return Ok(ENDLESS) };
    // The files an epoch reads: this shard's when there are at least as many files as
    // shards (`RecordPipeline::epoch_order`), else every file, sharded by record.
    let file_shard = spec.pipeline.shard.filter(|shard| files.len() >= shard.count);
    if matches!(spec.source.format, SourceFormat::Columnar(_)) && files.len() > MAX_FOOTERS {
        return Ok(UNKNOWN);
    }
    let mut records: u64 = 0;
    for (i, file) in files.iter().enumerate() {
        if file_shard.is_some_and(|shard| i % shard.count != shard.index) {
            continue;
        }
        let Some(count) = records_in(spec, file)? else { return Ok(UNKNOWN) };
        records = records.saturating_add(count);
    }
    if let Some(shard) = spec.pipeline.shard.filter(|_| file_shard.is_none()) {
        // The records whose ordinal in the epoch is `index` modulo `count`.
        records = records.saturating_sub(shard.index as u64).div_ceil(shard.count as u64);
    }
    let per_epoch = match spec.batch_size as u64 {
        0 => records,
        batch if spec.drop_remainder => records / batch,
        batch => records.div_ceil(batch),
    };
    Ok(i64::try_from(per_epoch.saturating_mul(epochs)).unwrap_or(i64::MAX))
}

/// The records of `file`, if its format says without reading them.
fn records_in(spec: &ReaderSpec, file: &DataFile) -> Result<Option<u64>> {
    Ok(match &spec.source.format {
        SourceFormat::Columnar(config) => unit_starts(file, config.format)?.last().copied(),
        SourceFormat::Framed(FormatConfig::FixedLength(config))
            if config.hop_bytes.is_none() && spec.source.compression_of(file) == Compression::None =>
        {
            let body = file.byte_len()?.saturating_sub(config.header_bytes + config.footer_bytes);
            Some(body / config.record_bytes)
        }
        SourceFormat::Framed(_) => None,
    })
}
