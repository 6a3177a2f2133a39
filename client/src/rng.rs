//! The client's random numbers (the benchmark workloads' data, the jitter of reconnection
//! delays): readerd's one generator, SplitMix64 (`readerd_common::rng`).

pub(crate) use readerd_common::rng::SplitMix64;
