//! The server-wide memory budget (`--memory-budget`): memory that grows with what a
//! request or a file asks for is reserved here before it is allocated, so that no client
//! and no file can take the process past the budget; the one that would gets
//! `RESOURCE_EXHAUSTED` and everyone else keeps being served.
//!
//! What reserves: each file's read and decompression buffer (as it grows towards
//! `--max-record-bytes`), each chunk of decoded batches until its stream has handed them
//! to the transport, and each reader's per-file state. Reservations may take three
//! quarters of the budget: the rest is for what is not reserved (the allocator's free
//! lists, the runtime, connections, the state store). A holder's first
//! [`SMALL_HOLDING`] bytes may use all of that; growth beyond it (a huge record, a huge
//! batch) only half of the budget, so a few runaway requests cannot starve the normal
//! streams.
//!
//! Not everything is reserved: what the network holds once a stream handed an element over
//! (tonic's encoded messages, HTTP/2 send queues), the allocator's free lists, the
//! runtime. So the process's resident memory is measured too, every 100 ms
//! ([`watch_resident_memory`]): a reservation is also refused when it would take the
//! reservations plus what the process holds beyond them past the whole budget, and past
//! the budget the allocator gives free memory back. Resident memory therefore stays
//! within the budget plus what grows between two measurements (README, "Limits").
//!
//! The budget is one per process, like the allocator it stands in front of: it is set
//! once at start ([`MemoryBudget::set_limit`] on [`server`]); until then (unit tests,
//! benches) nothing is limited.

use std::sync::atomic::{AtomicUsize, Ordering};

/// What a holder may reserve from the whole budget; beyond this it leaves a quarter of
/// the budget to others.
pub const SMALL_HOLDING: usize = 8 << 20;

/// Bytes reserved against a limit.
#[derive(Debug)]
pub struct MemoryBudget {
    used: AtomicUsize,
    /// What the process held beyond its reservations when last measured.
    unreserved: AtomicUsize,
    /// 0: no limit.
    limit: AtomicUsize,
}

static SERVER: MemoryBudget = MemoryBudget::new(0);

/// The process's budget.
pub fn server() -> &'static MemoryBudget {
    &SERVER
}

/// A reservation would take the server past its budget.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "the server's memory budget is exhausted: {what} needs {wanted} bytes more, {used} of --memory-budget {limit} \
     bytes are reserved and the process holds {unreserved} bytes beyond them (network buffers, the allocator); \
     retry later or ask for less"
)]
pub struct MemoryExhausted {
    pub what: String,
    pub wanted: usize,
    pub used: usize,
    pub unreserved: usize,
    pub limit: usize,
}

impl MemoryBudget {
    pub const fn new(limit: usize) -> Self {
        Self { used: AtomicUsize::new(0), unreserved: AtomicUsize::new(0), limit: AtomicUsize::new(limit) }
    }

    /// Sets the limit in bytes (0: none); the server does it once, at start.
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    /// The limit in bytes; 0 when there is none.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Bytes reserved now.
    pub fn reserved(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// What the process held beyond its reservations when last measured.
    pub fn unreserved(&self) -> usize {
        self.unreserved.load(Ordering::Relaxed)
    }

    /// The process holds `resident` bytes now (its resident set), of which `excluded` are
    /// bounded otherwise (the record cache, by `--cache-bytes`).
    pub fn measured(&self, resident: usize, excluded: usize) {
        let unreserved = resident.saturating_sub(self.reserved()).saturating_sub(excluded);
        self.unreserved.store(unreserved, Ordering::Relaxed);
    }

    /// Whether what can wait (a stream reading ahead of its trainer) may take `bytes` more
    /// now: it leaves a quarter of the room reservations of that size have, and a quarter
    /// of the budget, to what cannot (a stream's next element, a file's read buffer).
    pub fn room_to_read_ahead(&self, bytes: usize) -> bool {
        let limit = self.limit();
        if limit == 0 {
            return true;
        }
        let ceiling = ceiling(limit, bytes);
        let total = self.reserved().saturating_add(bytes);
        total <= ceiling - ceiling / 4 && total.saturating_add(self.unreserved()) <= limit - limit / 4
    }

    /// An empty reservation, to grow with [`Reservation::resize`].
    pub fn reservation(&'static self) -> Reservation {
        Reservation { budget: self, bytes: 0 }
    }

    /// A reservation of `bytes` for `what` (named in the error).
    pub fn reserve(&'static self, bytes: usize, what: impl FnOnce() -> String) -> Result<Reservation, MemoryExhausted> {
        let mut reservation = self.reservation();
        reservation.resize(bytes, what)?;
        Ok(reservation)
    }
}

/// What all reservations may add up to when one holding grows to `bytes` under `limit`:
/// three quarters of the budget for small holdings, half of it beyond [`SMALL_HOLDING`].
fn ceiling(limit: usize, bytes: usize) -> usize {
    if bytes > SMALL_HOLDING { limit / 2 } else { limit - limit / 4 }
}

/// Bytes held against a budget, given back when dropped or shrunk.
#[derive(Debug)]
pub struct Reservation {
    budget: &'static MemoryBudget,
    bytes: usize,
}

impl Default for Reservation {
    fn default() -> Self {
        server().reservation()
    }
}

impl Reservation {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes over what `other` holds (no new reservation: the bytes stay reserved).
    pub fn absorb(&mut self, mut other: Reservation) {
        debug_assert!(std::ptr::eq(self.budget, other.budget));
        self.bytes += std::mem::take(&mut other.bytes);
    }

    /// Holds `bytes` from now on: growth is reserved first and refused when it would go
    /// past the budget (the reservation is then unchanged); shrinking always succeeds.
    pub fn resize(&mut self, bytes: usize, what: impl FnOnce() -> String) -> Result<(), MemoryExhausted> {
        let used = &self.budget.used;
        if bytes <= self.bytes {
            used.fetch_sub(self.bytes - bytes, Ordering::Relaxed);
            self.bytes = bytes;
            return Ok(());
        }
        let more = bytes - self.bytes;
        let limit = self.budget.limit();
        if limit > 0 {
            let ceiling = ceiling(limit, bytes);
            let unreserved = self.budget.unreserved();
            let grown = used.fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(more).filter(|&total| total <= ceiling && total.saturating_add(unreserved) <= limit)
            });
            if let Err(used) = grown {
                return Err(MemoryExhausted { what: what(), wanted: more, used, unreserved, limit });
            }
        } else {
            used.fetch_add(more, Ordering::Relaxed);
        }
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Measures the process's resident memory every `period` on a thread of its own, for
/// the budget's checks ([`MemoryBudget::measured`]; `excluded` says how much of it is
/// bounded otherwise). When what is not reserved passes the quarter of the budget left
/// for it, it has the allocator give free memory back first (at most once a second), so
/// that memory freed after a burst is not counted against new reservations. Does nothing without a budget or where `/proc/self/status`
/// cannot be read.
pub fn watch_resident_memory(period: std::time::Duration, excluded: impl Fn() -> usize + Send + 'static) {
    let budget = server();
    if budget.limit() == 0 || resident_bytes().is_none() {
        return;
    }
    let watch = move || {
        let mut trimmed_at: Option<std::time::Instant> = None;
        loop {
            std::thread::sleep(period);
            let Some(resident) = resident_bytes() else { continue };
            let excluded = excluded();
            let recently = trimmed_at.is_some_and(|at| at.elapsed() < std::time::Duration::from_secs(1));
            let limit = budget.limit();
            let unreserved = resident.saturating_sub(excluded).saturating_sub(budget.reserved());
            if unreserved > limit / 4 && !recently {
                crate::batch_buffers::release();
                readerd_proto::allocator::release_free_memory();
                trimmed_at = Some(std::time::Instant::now());
                continue; // measured again next time, after the trim
            }
            budget.measured(resident, excluded);
        }
    };
    let _ = std::thread::Builder::new().name("readerd-memory".into()).spawn(watch);
}

/// The process's resident set (`VmRSS`), in bytes.
pub fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: usize = line.trim_start_matches("VmRSS:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

/// Gives freed memory back to the kernel once the server is idle: every `period`, if no
/// stream is known and streams were opened or memory given back lately (so that RSS after
/// a burst of reading comes back near its idle figure). `streams` tells how many streams
/// were ever opened and how many the server knows now: open, or lingering after their end
/// with their reader (a private stream may still be checkpointed for a while), whose
/// memory is freed only when they go.
///
/// The release is tried again on the next few idle periods after a change: what a stream
/// held may be dropped a moment after the stream is forgotten (its reader's last holder is
/// a task or thread still finishing), and one release before that would leave it resident.
pub async fn release_when_idle(period: std::time::Duration, streams: impl Fn() -> (u64, u64)) {
    const RELEASES_AFTER_A_CHANGE: u32 = 5;
    let mut last_seen = (0, 0);
    let mut releases_left = 0;
    loop {
        tokio::time::sleep(period).await;
        let (opened, known) = streams();
        let now = (opened, server().reserved());
        if now != last_seen {
            last_seen = now;
            releases_left = RELEASES_AFTER_A_CHANGE;
        }
        if known == 0 && releases_left > 0 {
            releases_left -= 1;
            let _ = tokio::task::spawn_blocking(readerd_proto::allocator::release_free_memory).await;
        }
    }
}

/// The default budget: half of the memory this process may use (the cgroup's limit when
/// it has one, else the machine's), leaving the rest to the page cache and the
/// allocator's own overhead. 0 (no budget) when neither can be read.
pub fn default_limit() -> usize {
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|info| {
        let line = info.lines().find(|line| line.starts_with("MemTotal:"))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        kib.checked_mul(1024)
    });
    let cgroup = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok()?.trim().parse::<u64>().ok());
    let available = match (machine, cgroup) {
        (Some(machine), Some(cgroup)) => machine.min(cgroup),
        (machine, cgroup) => machine.or(cgroup).unwrap_or(0),
    };
    usize::try_from(available / 2).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_budget_and_come_back() {
        let budget: &'static MemoryBudget = Box::leak(Box::new(MemoryBudget::new(128 << 20)));
        let mut large = budget.reservation();
        // A large holding may take half of the budget, no more.
        large.resize(64 << 20, || "a".into()).unwrap();
        let err = large.resize(80 << 20, || "a large record".into()).unwrap_err();
        assert_eq!(large.bytes(), 64 << 20);
        assert!(err.to_string().contains("a large record needs 16777216 bytes more"), "{err}");
        // Small holdings may use what is left of three quarters.
        let small: Vec<_> = (0..4).map(|_| budget.reserve(SMALL_HOLDING, String::new).unwrap()).collect();
        assert!(budget.reserve(SMALL_HOLDING, String::new).is_err());
        drop(small);
        large.resize(1 << 20, String::new).unwrap();
        assert_eq!(budget.reserved(), 1 << 20);
        drop(large);
        assert_eq!(budget.reserved(), 0);
    }

    #[test]
    fn reading_ahead_leaves_a_quarter_of_the_room_to_what_cannot_wait() {
        let budget: &'static MemoryBudget = Box::leak(Box::new(MemoryBudget::new(128 << 20)));
        // Large holdings may take 64 MiB: reading ahead, 48 of them.
        let held = budget.reserve(40 << 20, String::new).unwrap();
        assert!(budget.room_to_read_ahead(8 << 20), "48 MiB");
        assert!(!budget.room_to_read_ahead(9 << 20), "49 MiB");
        budget.reserve(9 << 20, String::new).expect("a reservation of what cannot wait still fits");
        drop(held);
        // What the process holds beyond its reservations counts too: 96 MiB of the 128 in all.
        budget.measured(90 << 20, 0);
        assert!(!budget.room_to_read_ahead(9 << 20));
        assert!(MemoryBudget::new(0).room_to_read_ahead(usize::MAX), "no budget: no limit");
    }

    #[test]
    fn the_default_is_half_of_what_the_machine_has() {
        let limit = default_limit();
        assert!(limit > 0, "this machine's memory could not be read");
        assert!(limit < 1 << 50);
    }
}
