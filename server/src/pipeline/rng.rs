//! The pipeline's random numbers: SplitMix64, readerd's one generator
//! (`readerd_common::rng`), whose whole state is one `u64` (a checkpoint stores it as
//! is) and whose values never change between releases.

pub use readerd_common::rng::SplitMix64;
