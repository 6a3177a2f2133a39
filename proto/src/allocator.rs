//! glibc's allocator tuned for processes that stream large batches, server or trainer.
//!
//! Batches are megabytes, allocated and freed many times a second. With glibc's defaults
//! every buffer above 128 KiB is mapped and unmapped, and free memory above 128 KiB at the
//! top of a heap is returned to the kernel, so each new batch faults in pages the kernel
//! zeroes first. Raising both thresholds took the images workload from about 1.0 to
//! 1.8 GB/s and halved page faults; one heap (arena) per core halved the server's peak
//! memory at the same rate (bench/README.md).

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
            libc::mallopt(libc::M_TRIM_THRESHOLD, 128 << 20);
            if let Some(arenas) = arenas {
                libc::mallopt(libc::M_ARENA_MAX, arenas);
            }
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = arenas;
}

/// Gives the kernel back the free memory of every heap (glibc's `malloc_trim`): with the
/// thresholds [`tune`] sets, memory freed after a burst otherwise stays mapped. Walks every
/// heap under its lock: call it when the process is idle, off the async runtime. Does
/// nothing outside glibc.
#[allow(unsafe_code)]
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's own heaps to the kernel; it
    // takes each heap's lock, so it is safe while other threads allocate.
    unsafe {
        libc::malloc_trim(0);
    }
}
