//! Where a stream's elements come from: a chunk of its reader, read on a blocking
//! thread, its payload bytes reserved from the memory budget.

use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinHandle;

use super::CHUNK_BYTES;
use super::unsent::Unsent;
use crate::checkpoint::StreamRecord;
use crate::element::Element;
use crate::reader::{Chunk, Reader, catch_decode_panic};
use crate::watch::stages::Stage;

/// Reads the next chunk of up to `wanted` elements, the first of which will be the
/// stream's element `next_seq`, on a blocking thread; its elements come in an [`Unsent`]
/// (when the stream no longer waits for them, they go back at once), the chunk without
/// them. The chunk's bytes are reserved from the memory budget until the transport takes
/// its elements from the stream's buffer; when the budget cannot hold them the chunk
/// still goes out (it is made), and the stream then ends with `RESOURCE_EXHAUSTED`.
pub(super) fn read_chunk(
    reader: &Arc<Reader>,
    record: &Arc<StreamRecord>,
    next_seq: i64,
    wanted: usize,
) -> JoinHandle<(Unsent, Chunk)> {
    let reader = reader.clone();
    let snapshots = record.checkpointable.then(|| record.clone());
    let shared = !record.checkpointable;
    let asked = Instant::now();
    tokio::task::spawn_blocking(move || {
        // Waiting for a blocking thread is queueing.
        reader.watch().stages.add(Stage::Queueing, asked.elapsed());
        // Checkpoints rebuild the state after any element from the state before its chunk.
        if let Some(snapshots) = snapshots {
            snapshots.snapshot(next_seq);
        }
        // A panic (a bug) ends this stream with INTERNAL naming the reader, and is counted.
        let mut chunk =
            catch_decode_panic(reader.name(), || reader.next_chunk(wanted, CHUNK_BYTES)).unwrap_or_else(|err| {
                reader.fail_after_panic(err.clone());
                Chunk { error: Some(err), ..Chunk::default() }
            });
        reserve_chunk(&reader, &mut chunk);
        let mut unsent = Unsent::new(&reader, shared);
        unsent.take_from(&mut chunk);
        (unsent, chunk)
    })
}

/// Reserves `chunk`'s payload bytes from the memory budget (nothing for elements a job
/// window holds: it counts them); short of them, the chunk ends with the error.
fn reserve_chunk(reader: &Reader, chunk: &mut Chunk) {
    if chunk.payloads_in_window {
        return;
    }
    let bytes = chunk.elements.iter().map(Element::payload_bytes).sum();
    let what = || format!("a chunk of {} elements of reader {}", chunk.elements.len(), reader.name());
    if let Err(err) = chunk.reserved.resize(bytes, what) {
        chunk.error = Some(err.into());
        chunk.end_of_sequence = false;
    }
}
