//! Reused buffers for batches too large for the allocator to keep.
//!
//! glibc maps every allocation above its mmap threshold (32 MiB, the most it allows,
//! `readerd_proto::allocator::tune`) and unmaps it on free, so each such batch (64
//! 224×224×3 float32 crops are 38 MiB) faults in pages the kernel zeroes first: a seventh
//! of the server's time on the `jpeg` workload (`perf record`, bench/README.md). Such a
//! batch's buffer is taken from here ([`take`]) and handed on as [`Bytes`] ([`into_bytes`])
//! that put it back when the last reference drops (the stream sent it), for the next
//! batch to write into pages already mapped.
//!
//! At most [`MAX_FREE_BYTES`] wait here, and [`release`] gives them back (the memory
//! watch does, when resident memory presses on the budget).

use std::sync::Mutex;

use bytes::Bytes;
use readerd_common::sync::MutexUnpoisoned;

/// Buffers at least this large are pooled: glibc keeps smaller ones itself.
pub const POOLED_FROM: usize = 32 << 20;
/// The most free buffers the pool holds, in bytes of capacity.
pub const MAX_FREE_BYTES: usize = 128 << 20;

static FREE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An empty buffer of at least `capacity` bytes: a free one of the pool that fits (the
/// smallest such), or a new one.
pub fn take(capacity: usize) -> Vec<u8> {
    if capacity >= POOLED_FROM {
        let mut free = FREE.lock_unpoisoned();
        let fits = free.iter().enumerate().filter(|(_, b)| b.capacity() >= capacity).min_by_key(|(_, b)| b.capacity());
        if let Some((at, _)) = fits {
            return free.swap_remove(at);
        }
    }
    Vec::with_capacity(capacity)
}

/// `buffer` as `Bytes`; a pooled-size buffer goes back to the pool when its last
/// reference drops.
pub fn into_bytes(buffer: Vec<u8>) -> Bytes {
    if buffer.capacity() >= POOLED_FROM { Bytes::from_owner(Returned(buffer)) } else { Bytes::from(buffer) }
}

/// Frees every buffer the pool holds; returns their bytes.
pub fn release() -> usize {
    let free = std::mem::take(&mut *FREE.lock_unpoisoned());
    free.iter().map(Vec::capacity).sum()
}

/// Bytes of free buffers the pool holds.
pub fn free_bytes() -> usize {
    FREE.lock_unpoisoned().iter().map(Vec::capacity).sum()
}

/// A batch's buffer, back to the pool when dropped.
struct Returned(Vec<u8>);

impl AsRef<[u8]> for Returned {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        let mut buffer = std::mem::take(&mut self.0);
        buffer.clear();
        let mut free = FREE.lock_unpoisoned();
        let held: usize = free.iter().map(Vec::capacity).sum();
        if held + buffer.capacity() <= MAX_FREE_BYTES {
            free.push(buffer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_batch_buffer_is_reused_after_its_bytes_drop() {
        release();
        let mut buffer = take(POOLED_FROM);
        buffer.extend_from_slice(&[7; 16]);
        let address = buffer.as_ptr();
        let bytes = into_bytes(buffer);
        let slice = bytes.slice(4..8);
        drop(bytes);
        assert_eq!(free_bytes(), 0, "still referenced by a slice");
        assert_eq!(&slice[..], &[7; 4]);
        drop(slice);
        assert!(free_bytes() >= POOLED_FROM);
        let again = take(POOLED_FROM);
        assert_eq!(again.as_ptr(), address, "the same pages");
        assert!(again.is_empty());
        assert_eq!(free_bytes(), 0);
        // Small buffers are the allocator's; the pool never holds more than its bound.
        drop(into_bytes(take(1024)));
        assert_eq!(free_bytes(), 0);
        let many: Vec<Bytes> = (0..8).map(|_| into_bytes(take(POOLED_FROM))).collect();
        drop(many);
        assert!(free_bytes() <= MAX_FREE_BYTES);
        assert!(release() > 0);
        assert_eq!(free_bytes(), 0);
    }
}
