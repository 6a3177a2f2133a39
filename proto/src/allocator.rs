//! glibc's allocator tuned for processes that stream large batches, server or trainer.
//!
//! Batches are megabytes, allocated and freed many times a second. With glibc's defaults
//! every buffer above 128 KiB is mapped and unmapped, and free memory above 128 KiB at the
//! top of a heap is returned to the kernel, so each new batch faults in pages the kernel
//! zeroes first. Raising both thresholds took the images workload from about 1.0 to
//! 1.8 GB/s and halved page faults; one heap (arena) per core halved the server's peak
//! memory at the same rate (bench/README.md).

/// The trim threshold [`tune`] sets: free memory at the top of a heap below this stays
/// mapped for the next batch.
const TRIM_THRESHOLD: libc::c_int = 128 << 20;

/// How many heaps glibc may use, as [`tune`] set it (0: glibc's default, 8 per core).
static ARENAS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Keeps freed memory for reuse (mmap threshold 32 MiB, trim threshold 128 MiB) and, with
/// `arenas`, limits glibc to that many heaps. Call it first thing in `main`, before any
/// thread starts. Does nothing outside glibc.
#[allow(unsafe_code)]
pub fn tune(arenas: Option<usize>) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let arenas = arenas.map(|n| libc::c_int::try_from(n.max(1)).unwrap_or(libc::c_int::MAX));
        // SAFETY: mallopt only changes glibc's tuning parameters, and every value is within
        // glibc's documented ranges (M_MMAP_THRESHOLD at most 32 MiB on 64-bit, M_ARENA_MAX
        // at least 1).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
            if let Some(arenas) = arenas {
                libc::mallopt(libc::M_ARENA_MAX, arenas);
                ARENAS.store(arenas as usize, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}

/// Gives the kernel back the free memory of every heap. glibc's `malloc_trim` returns the
/// free pages inside each heap and the top of the main one, but not the top of the other
/// heaps (glibc 2.36): those shrink only when a large block is freed into them while their
/// top passes the trim threshold, so with [`tune`]'s 128 MiB each kept up to that much
/// after a burst (62 MB mapped, 0.2 MB in use, measured). So the threshold is lowered for
/// the call, and one short-lived thread per heap frees a 256 KiB block: glibc gives each
/// new thread the next heap in turn once all exist. Walks every heap under its lock and
/// starts threads: call it when the process is idle, off the async runtime. Does nothing
/// outside glibc.
#[allow(unsafe_code)]
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let arenas = match ARENAS.load(std::sync::atomic::Ordering::Relaxed) {
            0 => 8 * cores,
            arenas => arenas,
        };
        // SAFETY: mallopt only changes a tuning parameter (within glibc's range);
        // malloc_trim only returns free pages of glibc's own heaps to the kernel, taking
        // each heap's lock; the block is allocated, passed through black_box and freed by
        // the same thread, and a null pointer is never freed.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 20);
            libc::malloc_trim(0);
        }
        for _ in 0..arenas {
            let freed = std::thread::Builder::new().name("readerd-trim".into()).spawn(|| unsafe {
                let block = std::hint::black_box(libc::malloc(256 << 10));
                if !block.is_null() {
                    libc::free(block);
                }
            });
            if let Ok(thread) = freed {
                let _ = thread.join();
            }
        }
        // SAFETY: as above.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
        }
    }
}
