//! The client's random numbers (the benchmark workloads' data, the jitter of reconnection
//! delays): readerd's one generator, SplitMix64 (`readerd_common::rng`).

pub(crate) use readerd_common::rng::SplitMix64;

/// A generator from `state`, in the tuple spelling `resume.rs` still writes
/// (`SplitMix64(seed)`). It shares the struct's name in the value namespace only; it goes
/// once `resume.rs` writes `SplitMix64 { state: seed }`.
#[allow(non_snake_case)]
pub(crate) fn SplitMix64(state: u64) -> SplitMix64 {
    SplitMix64 { state }
}
