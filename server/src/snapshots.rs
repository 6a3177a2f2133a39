//! Which snapshots of a reader's state to keep when their list is full: a private
//! stream's (`checkpoint`) and a shared reader's (`reader::chunks`) thin out with age the
//! same way.

/// Which of a full list of snapshots (by the seq each starts at, ascending) to drop when
/// the stream reaches `head`.
///
/// A trainer checkpoints what it has received, which can be far behind what the server has
/// produced: HTTP/2 windows hold hundreds of small batches. Dropping the oldest snapshot
/// would lose every state that far back once chunks are small (one element each when the
/// trainer is slow). Instead the first snapshot is always kept, and so is the newest. The
/// one dropped is the one whose loss costs the least replay relative to how far behind the
/// head that replay would start.
/// The kept snapshots then thin out with age: a checkpoint `d` elements behind the head
/// replays at most about `0.3 d` elements from the nearest one (100,000 elements in 64
/// snapshots), instead of failing once `d` passes 64 small chunks.
pub fn least_needed(seqs: &[i64], head: i64) -> usize {
    (1..seqs.len() - 1)
        .min_by_key(|&i| {
            // Without snapshot i, a checkpoint just before the next one replays from the
            // one before: `gap` elements, `distance` behind the head.
            let gap = seqs[i + 1] - seqs[i - 1];
            let distance = (head - seqs[i + 1]).max(1);
            (gap << 16) / distance
        })
        .expect("a full list holds more than two snapshots")
}

#[cfg(test)]
mod tests {
    use super::least_needed;

    #[test]
    fn kept_snapshots_reach_back_to_the_start_and_thin_out_with_age() {
        // One snapshot per element for 100,000 elements, as a slow trainer causes.
        let mut seqs: Vec<i64> = Vec::new();
        for next_seq in 0..100_000 {
            if seqs.len() == 64 {
                seqs.remove(least_needed(&seqs, next_seq));
            }
            seqs.push(next_seq);
        }
        assert_eq!(seqs.len(), 64);
        assert_eq!((seqs[0], *seqs.last().unwrap()), (0, 99_999), "the start and the newest stay");
        // A checkpoint `d` behind the head replays from the snapshot at or before it: at
        // most 30% of `d` (64 snapshots over five decades; the greedy choice reaches 27%).
        let head = 100_000;
        for d in 1..=head {
            let wanted = head - d;
            let from = seqs.iter().rev().find(|&&seq| seq <= wanted).unwrap();
            assert!(wanted - from <= d * 3 / 10 + 1, "{d} behind: replays {} from {from}", wanted - from);
        }
    }
}
