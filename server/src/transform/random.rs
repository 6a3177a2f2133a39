//! The draws of random operations. Each operation of each element has its own generator,
//! seeded by (`pipeline.seed`, epoch, the element's key, the operation's index): an
//! element's output is a pure function of them, whatever thread, replica, job or resume
//! computes it, and a checkpoint stores nothing for it. What is drawn follows TensorFlow's
//! distributions: `random_uniform` for deltas, factors and flips, and the box of
//! `sample_distorted_bounding_box` (its `GenerateRandomCrop`) for a resized crop.

/// Where an element's draws come from.
#[derive(Clone, Copy, Debug)]
pub struct ElementSeed {
    pub seed: u64,
    pub epoch: u64,
    /// A stable hash of the element's key.
    pub key_hash: u64,
}

impl ElementSeed {
    pub fn new(seed: u64, epoch: u64, key: &str) -> Self {
        Self { seed, epoch, key_hash: fnv1a(key.as_bytes()) }
    }

    /// The generator of operation `op` (its index in the spec's list).
    pub fn generator(&self, op: usize) -> Draws {
        let mut state = self.seed;
        for part in [self.epoch, self.key_hash, op as u64] {
            state = splitmix(&mut (state ^ part.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        }
        let mut seeder = state;
        Draws { state: [splitmix(&mut seeder), splitmix(&mut seeder), splitmix(&mut seeder), splitmix(&mut seeder)] }
    }
}

/// FNV-1a, 64 bits: fixed forever (changing it would change every stored element's draws).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One operation's generator (xoshiro256++).
#[derive(Clone, Debug)]
pub struct Draws {
    state: [u64; 4],
}

impl Draws {
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with float32's 24 bits, as `random_uniform`'s float32.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// Uniform in [`low`, `high`) in float32, as `random_uniform([], low, high)`.
    pub fn uniform(&mut self, low: f32, high: f32) -> f32 {
        self.unit() * (high - low) + low
    }

    /// `Uniform(n)` of TensorFlow's `SimplePhilox`: a 32-bit draw modulo `n`.
    pub fn below(&mut self, n: u32) -> u32 {
        if n == 0 { 0 } else { (self.next_u64() >> 32) as u32 % n }
    }
}

/// What `sample_distorted_bounding_box` is given, with no boxes (the whole image is the
/// object, `use_image_if_no_bounding_boxes`).
#[derive(Clone, Debug, PartialEq)]
pub struct BoxSampling {
    pub area: (f32, f32),
    pub aspect_ratio: (f32, f32),
    pub min_object_covered: f32,
    pub max_attempts: u32,
}

/// A crop box: top, left, height, width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CropBox {
    pub top: usize,
    pub left: usize,
    pub height: usize,
    pub width: usize,
}

/// A box drawn as `SampleDistortedBoundingBoxV2` draws it for an image of `height` ×
/// `width`: up to `max_attempts` aspect ratios, each giving a crop (`GenerateRandomCrop`)
/// kept if it covers `min_object_covered` of the image; the whole image if none does.
pub fn sample_box(sampling: &BoxSampling, height: usize, width: usize, draws: &mut Draws) -> CropBox {
    let whole = CropBox { top: 0, left: 0, height, width };
    let image_area = (height * width) as f32;
    for _ in 0..sampling.max_attempts {
        let (lo, hi) = sampling.aspect_ratio;
        let aspect_ratio = draws.unit() * (hi - lo) + lo;
        if let Some(crop) = random_crop_box(width, height, sampling.area, aspect_ratio, draws) {
            let covered = if image_area == 0.0 { 0.0 } else { (crop.height * crop.width) as f32 / image_area };
            if covered >= sampling.min_object_covered {
                return crop;
            }
        }
    }
    whole
}

/// `lrintf`: to the nearest integer, ties to even.
fn lrint(x: f32) -> i64 {
    x.round_ties_even() as i64
}

/// TensorFlow's `GenerateRandomCrop`.
fn random_crop_box(
    width: usize,
    height: usize,
    area: (f32, f32),
    aspect_ratio: f32,
    draws: &mut Draws,
) -> Option<CropBox> {
    let (w0, h0) = (width as i64, height as i64);
    let min_area = area.0 * width as f32 * height as f32;
    let max_area = area.1 * width as f32 * height as f32;
    let mut h = lrint((min_area / aspect_ratio).sqrt());
    let mut max_h = lrint((max_area / aspect_ratio).sqrt());
    if lrint(max_h as f32 * aspect_ratio) > w0 {
        const EPS: f32 = 0.000_000_1;
        max_h = ((w0 as f32 + 0.5 - EPS) / aspect_ratio) as i64;
        if lrint(max_h as f32 * aspect_ratio) > w0 {
            max_h -= 1;
        }
    }
    max_h = max_h.min(h0);
    h = h.min(max_h);
    if h < max_h {
        h += i64::from(draws.below((max_h - h + 1) as u32));
    }
    let mut w = lrint(h as f32 * aspect_ratio);
    let mut a = (w * h) as f32;
    if a < min_area {
        h += 1;
        w = lrint(h as f32 * aspect_ratio);
        a = (w * h) as f32;
    }
    if a > max_area {
        h -= 1;
        w = lrint(h as f32 * aspect_ratio);
        a = (w * h) as f32;
    }
    if a < min_area || a > max_area || w > w0 || h > h0 || w <= 0 || h <= 0 {
        return None;
    }
    let top = if h < h0 { draws.below((h0 - h) as u32) as usize } else { 0 };
    let left = if w < w0 { draws.below((w0 - w) as u32) as usize } else { 0 };
    Some(CropBox { top, left, height: h as usize, width: w as usize })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_element_draws_the_same_wherever_it_is_computed_and_anew_each_epoch() {
        let a = ElementSeed::new(42, 1, "images/part-0.tfrecord:1234");
        let b = ElementSeed::new(42, 1, "images/part-0.tfrecord:1234");
        assert_eq!(a.generator(3).next_u64(), b.generator(3).next_u64());
        assert_ne!(a.generator(3).next_u64(), a.generator(4).next_u64(), "each operation draws its own");
        assert_ne!(
            a.generator(3).next_u64(),
            ElementSeed::new(42, 2, "images/part-0.tfrecord:1234").generator(3).next_u64()
        );
        assert_ne!(
            a.generator(3).next_u64(),
            ElementSeed::new(43, 1, "images/part-0.tfrecord:1234").generator(3).next_u64()
        );
    }

    #[test]
    fn sampled_boxes_keep_to_the_area_and_aspect_ratio_ranges_and_spread_over_them() {
        let sampling = BoxSampling {
            area: (0.08, 1.0),
            aspect_ratio: (0.75, 4.0 / 3.0),
            min_object_covered: 0.1,
            max_attempts: 10,
        };
        let (height, width) = (375, 500);
        let (mut small, mut large, mut tall, mut wide, mut whole) = (0, 0, 0, 0, 0);
        for n in 0..10_000 {
            let mut draws = ElementSeed::new(7, 1, &format!("k:{n}")).generator(0);
            let crop = sample_box(&sampling, height, width, &mut draws);
            assert!(crop.top + crop.height <= height && crop.left + crop.width <= width, "{crop:?}");
            if crop == (CropBox { top: 0, left: 0, height, width }) {
                whole += 1;
                continue;
            }
            let fraction = (crop.height * crop.width) as f32 / (height * width) as f32;
            let ratio = crop.width as f32 / crop.height as f32;
            assert!((0.079..=1.0).contains(&fraction), "{fraction}");
            assert!((0.74..=1.345).contains(&ratio), "{ratio} {crop:?}");
            small += usize::from(fraction < 0.3);
            large += usize::from(fraction > 0.7);
            tall += usize::from(ratio < 0.9);
            wide += usize::from(ratio > 1.2);
        }
        // The spread: every part of both ranges is drawn often.
        for (what, count) in [("small", small), ("large", large), ("tall", tall), ("wide", wide)] {
            assert!(count > 500, "{what}: {count} of 10000");
        }
        assert!(whole < 500, "whole image {whole} times");
    }

    #[test]
    fn uniform_draws_are_uniform() {
        let mut draws = ElementSeed::new(1, 1, "x").generator(0);
        let mut buckets = [0u32; 10];
        for _ in 0..10_000 {
            let u = draws.uniform(-0.5, 0.5);
            assert!((-0.5..0.5).contains(&u));
            buckets[((u + 0.5) * 10.0) as usize] += 1;
        }
        assert!(buckets.iter().all(|&b| (850..1150).contains(&b)), "{buckets:?}");
    }
}
