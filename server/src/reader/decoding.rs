//! Where records are decoded: a reader's [`Decoding`] is the one stage that calls its
//! spec's decoder (`tests/source_layout.rs` checks it). A batch becomes an element here,
//! the decoder over the whole batch, and with `onError: SKIP` the records at fault found,
//! counted and dropped; a mixture's components decode their records of a set here
//! (`mix_decode.rs`), and a record is decoded alone here for a selection's predicates
//! and for `unbatch`. The spec's transforms run here, after the decoder, on every path
//! (`crate::transform`: per record, before the batch is stacked). A panic while decoding
//! is caught here too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::decode::{Decoder, RecordValue, Tensor};
use crate::element::{Element, Keys};
use crate::error::{Result, ServeError};
use crate::source::Record;
use crate::spec::ReaderSpec;
use crate::transform::Transforms;

/// Decoded features by name, and the indices of the values they hold.
pub(super) type DecodedValues = (Vec<(String, Tensor)>, Vec<usize>);

/// Batches as taken: each one's number and items.
pub(super) type Batches<T> = Vec<(u64, Vec<T>)>;

/// Each element's number and what decoding made of it, in order, up to the first error.
pub(super) type DecodedElements = Vec<(u64, Result<Option<Element>>)>;

/// Panics caught while reading, decoding or cutting an element into messages
/// (`readerd_decode_panics_total` in `crate::metrics`).
pub static DECODE_PANICS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs `work`, a decoding of reader `reader`'s records; a panic in it (a bug: no spec or
/// record may reach one) is caught, logged, counted (`readerd_decode_panics_total`) and
/// becomes an INTERNAL error naming the reader, which fails the reader and ends its
/// streams, not the server.
pub fn catch_decode_panic<T>(reader: &str, work: impl FnOnce() -> T) -> Result<T> {
    readerd_common::sync::catch_panic(work).map_err(|what| {
        DECODE_PANICS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::error!(reader = %reader, panic = %what, "decoding panicked");
        ServeError::Internal(format!("reader {reader}: decoding panicked: {what}"))
    })
}

/// A reader's decoding stage: its spec's decoder and `onError`, batched or not.
pub(super) struct Decoding {
    /// The reader's name, for messages.
    reader: String,
    decoder: Arc<Decoder>,
    transforms: Arc<Transforms>,
    skip_errors: bool,
    /// `pipeline.batchSize` > 0: elements are batches.
    batched: bool,
    /// Records that did not decode and were dropped (`onError: SKIP`) since the reader's
    /// state was last set (they count among its `records_skipped`).
    skipped: AtomicU64,
}

impl Decoding {
    pub(super) fn of(reader: &str, spec: &ReaderSpec) -> Self {
        Self {
            reader: reader.to_owned(),
            decoder: spec.decoder.clone(),
            transforms: spec.transforms.clone(),
            skip_errors: spec.skip_errors,
            batched: spec.batch_size > 0,
            skipped: AtomicU64::new(0),
        }
    }

    /// The same decoding, nothing dropped yet.
    pub(super) fn fresh(&self) -> Self {
        Self {
            reader: self.reader.clone(),
            decoder: self.decoder.clone(),
            transforms: self.transforms.clone(),
            skip_errors: self.skip_errors,
            batched: self.batched,
            skipped: AtomicU64::new(0),
        }
    }

    /// Records dropped since the reader's state was last set.
    pub(super) fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    /// The reader's state was set (restored or reset): its count holds what was dropped.
    pub(super) fn forget_skipped(&self) {
        self.skipped.store(0, Ordering::Relaxed);
    }

    /// Decodes a set of batches (`chunks.rs` hands a reader of files one at a time), each
    /// into its element (unnumbered). With `onError: SKIP`, records that do not decode are
    /// dropped and counted (`None` when none is left); otherwise the first error fails the
    /// reader. A panic is caught (see [`catch_decode_panic`]) and fails the set.
    pub(super) fn decode_set(&self, set: Batches<Record>) -> DecodedElements {
        let first = set.first().map_or(0, |(index, _)| *index);
        let decode = |batch: Vec<Record>| {
            let keys = Keys::of_records(&batch);
            let epochs: Vec<u64> = batch.iter().map(|record| record.epoch).collect();
            let values: Vec<RecordValue> = batch.into_iter().map(|record| record.value).collect();
            self.decode_keyed(&values, keys, &epochs, self.batched)
        };
        catch_decode_panic(&self.reader, || set.into_iter().map(|(index, batch)| (index, decode(batch))).collect())
            .unwrap_or_else(|err| vec![(first, Err(err))])
    }

    /// One record decoded alone, not as an element (a selection's predicates read its
    /// features, `unbatch` splits them): an error names it by `key`.
    pub(super) fn decode_record(&self, record: &Record, key: &str) -> Result<Vec<(String, Tensor)>> {
        let (values, keys) = (std::slice::from_ref(&record.value), [key.to_owned()]);
        self.decoder
            .decode_records(values, &keys, false)
            .map_err(|err| ServeError::Decode(format!("{} (record {key})", err.message)))
    }

    /// A mixture's component's records of a set decoded with their numeric fixed-shape
    /// rows written at their places in the set's buffers (`Decoder::decode_placed`).
    pub(super) fn decode_into_set(
        &self,
        values: &[RecordValue],
        place: &mut crate::decode::Placement<'_>,
    ) -> std::result::Result<crate::decode::PlacedFeatures, crate::decode::DecodeError> {
        if !self.transforms.is_empty() {
            // Transforms run per record after decoding: nothing is placed in the set's rows.
            return Err(crate::decode::DecodeError::new("transformed features are gathered, not placed"));
        }
        self.decoder.decode_placed(values, place)
    }

    /// One example of an unbatched record (`<key>[i]`), transformed.
    pub(super) fn transform_example(
        &self,
        features: Vec<(String, Tensor)>,
        key: &str,
        epoch: u64,
    ) -> Result<Vec<(String, Tensor)>> {
        if self.transforms.is_empty() {
            return Ok(features);
        }
        self.transforms
            .apply(features, epoch, key)
            .map_err(|message| ServeError::Decode(format!("{message} (record {key})")))
    }

    /// `values` named by `keys`, read for `epochs`, decoded and transformed as one element
    /// (see `decode_values`), unnumbered.
    pub(super) fn decode_keyed(
        &self,
        values: &[RecordValue],
        keys: Keys,
        epochs: &[u64],
        batched: bool,
    ) -> Result<Option<Element>> {
        let Some((features, kept)) = self.decode_and_transform(values, &|| keys.to_strings(), epochs, batched)? else {
            return Ok(None);
        };
        let keys = if kept.len() == keys.len() { keys } else { keys.select(&kept) };
        Ok(Some(Element::new(keys, features, Vec::new())))
    }

    /// `values`, read for `epochs`, decoded (see `decode_values`) and transformed: the
    /// features and which values they hold. Keys (`key_strings`) name records in messages,
    /// and seed each record's random transforms.
    pub(super) fn decode_and_transform(
        &self,
        values: &[RecordValue],
        key_strings: &dyn Fn() -> Vec<String>,
        epochs: &[u64],
        batched: bool,
    ) -> Result<Option<DecodedValues>> {
        if self.transforms.is_empty() {
            return self.decode_values(values, key_strings, batched);
        }
        self.decode_transformed(values, key_strings(), epochs, batched)
    }

    /// Decodes `values` (see `decode_values`), then runs the spec's transforms on each
    /// record (its draws from its key in `names` and its epoch). With `onError: SKIP`, a
    /// record whose transform fails is dropped and counted, and the others decoded again.
    fn decode_transformed(
        &self,
        values: &[RecordValue],
        names: Vec<String>,
        epochs: &[u64],
        batched: bool,
    ) -> Result<Option<DecodedValues>> {
        // Which of `values` are still in (all, until a transform drops one).
        let mut left: Vec<usize> = (0..values.len()).collect();
        loop {
            let now: Vec<RecordValue> = left.iter().map(|&i| values[i].clone()).collect();
            let now_names: Vec<String> = left.iter().map(|&i| names[i].clone()).collect();
            let Some((features, kept)) = self.decode_values(&now, &|| now_names.clone(), batched)? else {
                return Ok(None);
            };
            let ids: Vec<(&str, u64)> = kept.iter().map(|&k| (now_names[k].as_str(), epochs[left[k]])).collect();
            let result = if batched {
                self.transforms.apply_batch(features, &ids)
            } else {
                let (key, epoch) = ids[0];
                self.transforms
                    .apply(features, epoch, key)
                    .map_err(|message| crate::transform::TransformError { message, record: Some(0) })
            };
            let err = match result {
                Ok(features) => return Ok(Some((features, kept.iter().map(|&k| left[k]).collect()))),
                Err(err) => err,
            };
            let Some(at) = err.record else { return Err(ServeError::Decode(err.message)) };
            let key = ids[at].0;
            if !self.skip_errors {
                return Err(ServeError::Decode(format!("{} (record {key})", err.message)));
            }
            tracing::warn!(reader = %self.reader, record = %key, error = %err.message, "record skipped: a transform failed");
            self.skipped.fetch_add(1, Ordering::Relaxed);
            let dropped = left[kept[at]];
            left.retain(|&i| i != dropped);
            if left.is_empty() {
                return Ok(None);
            }
        }
    }

    /// Decodes `values` with the spec's decoder as a batch (`batched`) or one record: the
    /// features and which values they hold (all, unless `onError: SKIP` dropped and
    /// counted some; `None` when none is left). Keys name records only in messages
    /// (TensorFlow's `example_names`): `key_strings` makes them once a batch fails, which
    /// is then decoded again to word the error.
    pub(super) fn decode_values(
        &self,
        values: &[RecordValue],
        key_strings: &dyn Fn() -> Vec<String>,
        batched: bool,
    ) -> Result<Option<DecodedValues>> {
        let decoder = &self.decoder;
        let all = || (0..values.len()).collect();
        if let Ok(features) = decoder.decode_records(values, &[], batched) {
            return Ok(Some((features, all())));
        }
        let names = key_strings();
        let err = match decoder.decode_records(values, &names, batched) {
            Ok(features) => return Ok(Some((features, all()))),
            Err(err) => err,
        };
        if !self.skip_errors {
            return Err(ServeError::Decode(match err.record.and_then(|i| names.get(i)) {
                Some(key) => format!("{} (record {key})", err.message),
                None => err.message,
            }));
        }
        // Find the records at fault one by one, then decode the others as one batch.
        let (mut good, mut good_names, mut good_values) = (Vec::new(), Vec::new(), Vec::new());
        for (i, (name, value)) in names.into_iter().zip(values).enumerate() {
            match decoder.decode_records(std::slice::from_ref(value), std::slice::from_ref(&name), batched) {
                Ok(_) => {
                    good.push(i);
                    good_names.push(name);
                    good_values.push(value.clone());
                }
                Err(err) => {
                    tracing::warn!(reader = %self.reader, record = %name, error = %err, "undecodable record skipped");
                    self.skipped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if good_values.is_empty() {
            return Ok(None);
        }
        let features =
            decoder.decode_records(&good_values, &good_names, batched).map_err(|e| ServeError::Decode(e.message))?;
        Ok(Some((features, good)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    #[test]
    fn a_panic_while_decoding_is_an_internal_error_naming_the_reader_and_counted() {
        let before = DECODE_PANICS.load(Ordering::Relaxed);
        let result: Result<()> = catch_decode_panic("c/images", || panic!("chunk size must be non-zero"));
        let Err(ServeError::Internal(message)) = result else { panic!("{result:?}") };
        assert_eq!(message, "reader c/images: decoding panicked: chunk size must be non-zero");
        assert_eq!(tonic::Status::from(ServeError::Internal(message)).code(), tonic::Code::Internal);
        assert!(DECODE_PANICS.load(Ordering::Relaxed) > before);
        assert_eq!(catch_decode_panic("c/images", || 7).unwrap(), 7);
    }
}
