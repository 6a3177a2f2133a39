//! SplitMix64, readerd's one small random generator: its whole state is one `u64` (a
//! checkpoint stores it as is) and its values never change between releases. The
//! server's pipeline shuffles with it; the client draws the benchmark workloads' data
//! and the jitter of reconnection delays from it.

/// SplitMix64 (Steele, Lea, Flood 2014).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitMix64 {
    pub state: u64,
}

impl SplitMix64 {
    /// A generator for one purpose (`stream`) of one epoch, derived from the spec's seed,
    /// so that each epoch shuffles anew and the purposes do not share values.
    pub fn for_epoch(seed: u64, epoch: u64, stream: u64) -> Self {
        let mut mixer = Self { state: seed };
        let a = mixer.next_u64();
        let mut mixer = Self { state: a ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15) };
        let b = mixer.next_u64();
        Self { state: b ^ stream.wrapping_mul(0xd1b5_4a32_d192_ed03) }
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` without bias (Lemire's multiply-and-reject). `n` must be positive.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let product = u128::from(self.next_u64()) * u128::from(n);
            if (product as u64) >= threshold {
                return (product >> 64) as u64;
            }
        }
    }

    /// Uniform in `[0, 1)`: the top 53 bits of the next value.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_stable_and_uniform_enough() {
        // Fixed outputs: a checkpoint written by one release must restore in the next.
        let mut rng = SplitMix64 { state: 0 };
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        let mut counts = [0u32; 6];
        let mut rng = SplitMix64::for_epoch(42, 3, 1);
        for _ in 0..60_000 {
            counts[rng.below(6) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (9_500..10_500).contains(&c)), "{counts:?}");
        assert_ne!(SplitMix64::for_epoch(42, 1, 0), SplitMix64::for_epoch(42, 2, 0));
    }

    #[test]
    fn units_are_in_the_half_open_interval() {
        let mut rng = SplitMix64 { state: 7 };
        let units: Vec<f64> = (0..10_000).map(|_| rng.unit()).collect();
        assert!(units.iter().all(|u| (0.0..1.0).contains(u)));
        let mean = units.iter().sum::<f64>() / units.len() as f64;
        assert!((0.48..0.52).contains(&mean), "{mean}");
    }
}
