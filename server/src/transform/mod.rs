//! Transforms: a spec's per-element operations, run in order after decoding and before
//! batching (`transforms` beside `decoder`; DESIGN.md, "Preprocessing on the server").
//! Each is TensorFlow's op of the same name on one decoded feature; no I/O, no tokio.
//!
//! - [`Transforms`]: the list as parsed from a spec, applied to one record's features
//!   ([`Transforms::apply`]) or to a decoded batch, record by record
//!   ([`Transforms::apply_batch`]), and its output schema ([`Transforms::output`]);
//! - [`array`]: `slice`, `reshape`, `transpose`, `cast`, `scale`, `decodeRaw`;
//! - [`image_decode`]: `decodeImage` (JPEG by libjpeg-turbo, PNG, GIF, BMP);
//! - [`jpeg`]: libjpeg-turbo, set as TensorFlow sets it;
//! - [`image`]: crops, pads, flips, `convertImageDtype`, brightness, contrast,
//!   standardization, `normalize`;
//! - [`resize`]: `tf.image.resize`'s four methods;
//! - [`random`]: each element's draws, seeded by (seed, epoch, key, operation), and the
//!   box `sample_distorted_bounding_box` samples;
//! - [`values`]: a tensor's elements as numbers, cast as `static_cast` casts them.

pub mod array;
pub mod image;
pub mod image_decode;
pub mod jpeg;
pub mod random;
pub mod resize;
pub mod values;

use crate::decode::{DType, Dense, DenseStack, OutputFeature, OutputKind, Tensor};
use image::{Ranks, each_image};
use random::{BoxSampling, Draws, ElementSeed};
use resize::Method;

/// One operation, its parameters checked.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Slice {
        begin: Vec<i64>,
        size: Vec<i64>,
    },
    Reshape {
        shape: Vec<i64>,
    },
    Transpose {
        perm: Vec<i64>,
    },
    Cast {
        dtype: DType,
    },
    Scale {
        multiply: f64,
        add: f64,
    },
    Drop {
        features: Vec<String>,
    },
    DecodeRaw {
        out_type: DType,
        little_endian: bool,
    },
    DecodeImage {
        channels: u32,
    },
    Resize {
        height: usize,
        width: usize,
        method: Method,
    },
    CentralCrop {
        fraction: f64,
    },
    ResizeWithCropOrPad {
        height: usize,
        width: usize,
    },
    ConvertImageDtype {
        dtype: DType,
        saturate: bool,
    },
    Normalize {
        mean: Vec<f64>,
        std: Vec<f64>,
    },
    PerImageStandardization,
    FlipLeftRight,
    FlipUpDown,
    AdjustBrightness {
        delta: f64,
    },
    AdjustContrast {
        factor: f64,
    },
    RandomCrop {
        size: Vec<i64>,
    },
    /// `channels`: of an encoded image, decoded in the box (`decode_and_crop_jpeg`).
    RandomResizedCrop {
        height: usize,
        width: usize,
        sampling: BoxSampling,
        channels: u32,
        /// Of a JPEG: decode a box at least twice the output's size at 1/2, 1/4 or 1/8
        /// (libjpeg's DCT scaling); faster, not TensorFlow's pixels.
        fast: bool,
    },
    RandomFlipLeftRight,
    RandomFlipUpDown,
    RandomBrightness {
        max_delta: f64,
    },
    RandomContrast {
        lower: f64,
        upper: f64,
    },
}

impl Op {
    /// Its name in a spec.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Slice { .. } => "slice",
            Op::Reshape { .. } => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Cast { .. } => "cast",
            Op::Scale { .. } => "scale",
            Op::Drop { .. } => "drop",
            Op::DecodeRaw { .. } => "decodeRaw",
            Op::DecodeImage { .. } => "decodeImage",
            Op::Resize { .. } => "resize",
            Op::CentralCrop { .. } => "centralCrop",
            Op::ResizeWithCropOrPad { .. } => "resizeWithCropOrPad",
            Op::ConvertImageDtype { .. } => "convertImageDtype",
            Op::Normalize { .. } => "normalize",
            Op::PerImageStandardization => "perImageStandardization",
            Op::FlipLeftRight => "flipLeftRight",
            Op::FlipUpDown => "flipUpDown",
            Op::AdjustBrightness { .. } => "adjustBrightness",
            Op::AdjustContrast { .. } => "adjustContrast",
            Op::RandomCrop { .. } => "randomCrop",
            Op::RandomResizedCrop { .. } => "randomResizedCrop",
            Op::RandomFlipLeftRight => "randomFlipLeftRight",
            Op::RandomFlipUpDown => "randomFlipUpDown",
            Op::RandomBrightness { .. } => "randomBrightness",
            Op::RandomContrast { .. } => "randomContrast",
        }
    }
}

/// One step of the list: an operation, the feature it reads and the one it writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub op: Op,
    /// The feature read (none for `drop`).
    pub feature: String,
    /// The feature written: `feature` itself unless `output` names another.
    pub output: String,
}

/// A transform that failed on a record: TensorFlow's message, named by the step; `record`
/// is the record's index in a batch when the failure is its own (not the batch's).
#[derive(Clone, Debug, PartialEq)]
pub struct TransformError {
    pub message: String,
    pub record: Option<usize>,
}

/// A spec's transforms.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transforms {
    pub steps: Vec<Step>,
    /// `pipeline.seed`: where random operations' draws start.
    pub seed: u64,
    /// Pixels a decoded image may have (`--max-image-pixels`).
    pub max_image_pixels: u64,
}

/// Features by name, in order.
pub type Features = Vec<(String, Tensor)>;

impl Transforms {
    /// `steps` drawing from `seed` (`crate::spec::transforms` reads them from a spec).
    pub fn new(steps: Vec<Step>, seed: u64) -> Self {
        Self { steps, seed, max_image_pixels: image_decode::DEFAULT_MAX_IMAGE_PIXELS }
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Whether a step reads `name` (a batch's feature it must cut into records).
    pub fn reads(&self, name: &str) -> bool {
        self.steps.iter().any(|s| s.feature == name && !matches!(s.op, Op::Drop { .. }))
    }

    /// Whether `name` is dropped by a step.
    fn drops(&self, name: &str) -> bool {
        self.steps.iter().any(|s| matches!(&s.op, Op::Drop { features } if features.iter().any(|f| f == name)))
    }

    /// The steps applied to one record's features, drawn for the element `key` of `epoch`.
    pub fn apply(&self, mut features: Features, epoch: u64, key: &str) -> Result<Features, String> {
        let seed = ElementSeed::new(self.seed, epoch, key);
        for (index, step) in self.steps.iter().enumerate() {
            let words = |message: String| {
                format!("transforms[{index}] ({}) of feature {}: {message}", step.op.name(), step.feature)
            };
            if let Op::Drop { features: dropped } = &step.op {
                features.retain(|(name, _)| !dropped.contains(name));
                continue;
            }
            let Some(at) = features.iter().position(|(name, _)| *name == step.feature) else {
                let names: Vec<&str> = features.iter().map(|(n, _)| n.as_str()).collect();
                return Err(words(format!("no such feature (the element has {})", names.join(", "))));
            };
            let Tensor::Dense(input) = &features[at].1 else {
                return Err(words("transforms read dense features, not sparse or ragged ones".to_owned()));
            };
            let draws = &mut seed.generator(index);
            let flip = match step.op {
                Op::RandomFlipLeftRight => Some(true),
                Op::RandomFlipUpDown => Some(false),
                _ => None,
            };
            let output = match flip {
                // A feature replaced by its own flip: flipped in place when its buffer is
                // this element's alone (an earlier transform's output).
                Some(horizontal) if step.output == step.feature && input.shape.len() == 3 => {
                    let empty = Tensor::Dense(Dense::strings(vec![0], Vec::new()));
                    let Tensor::Dense(owned) = std::mem::replace(&mut features[at].1, empty) else { unreachable!() };
                    if draws.unit() < 0.5 { image::flip_owned(owned, horizontal) } else { Ok(owned) }
                }
                _ => run(&step.op, input, draws, self.max_image_pixels),
            }
            .map_err(words)?;
            match features.iter_mut().find(|(name, _)| *name == step.output) {
                Some((_, slot)) => *slot = Tensor::Dense(output),
                None => features.push((step.output.clone(), Tensor::Dense(output))),
            }
        }
        Ok(features)
    }

    /// The steps applied to a decoded batch record by record: the features the steps read
    /// are cut into their records (`ids`: each record's key and epoch), each record's
    /// transformed, and the results stacked again; features no step reads pass as they
    /// are (or are dropped). Records whose results differ in shape cannot be stacked, as
    /// TensorFlow's `batch` says.
    pub fn apply_batch(&self, batch: Features, ids: &[(&str, u64)]) -> Result<Features, TransformError> {
        let failed = |message: String| TransformError { message, record: None };
        let mut kept = Vec::with_capacity(batch.len());
        let mut records: Vec<Features> = ids.iter().map(|_| Vec::new()).collect();
        for (name, tensor) in batch {
            if !self.reads(&name) {
                if !self.drops(&name) {
                    kept.push((name, Some(tensor)));
                }
                continue;
            }
            let rows = match &tensor {
                Tensor::Dense(dense) => dense.unstack(),
                _ => None,
            };
            let rows = rows
                .filter(|rows| rows.len() == ids.len())
                .ok_or_else(|| failed(format!("transforms read dense features; {name} is not one a record")))?;
            for (record, row) in records.iter_mut().zip(rows) {
                record.push((name.clone(), Tensor::Dense(row)));
            }
            kept.push((name, None));
        }
        // Each record's outputs are copied into the batch's buffers as soon as they are made,
        // and freed: the next record's transforms reuse that memory, warm in cache, instead
        // of every record's outputs living until the batch is stacked.
        let mut stacked: Vec<Stacking> = Vec::new();
        for (i, (record, &(key, epoch))) in records.into_iter().zip(ids).enumerate() {
            let features =
                self.apply(record, epoch, key).map_err(|message| TransformError { message, record: Some(i) })?;
            if i == 0 {
                stacked = features.into_iter().map(|(name, tensor)| Stacking::first(name, tensor, ids.len())).collect();
                continue;
            }
            for (stacking, (_, tensor)) in stacked.iter_mut().zip(features) {
                stacking.push(tensor, i).map_err(failed)?;
            }
        }
        let mut stacked: Vec<(String, Tensor)> = stacked.into_iter().map(Stacking::finish).collect();
        // The batch's order: its features as they came, those the steps wrote in place,
        // then the new ones.
        let mut out: Features = Vec::with_capacity(kept.len() + stacked.len());
        for (name, tensor) in kept {
            match tensor {
                Some(tensor) => out.push((name, tensor)),
                None => {
                    if let Some(at) = stacked.iter().position(|(n, _)| *n == name) {
                        out.push(stacked.remove(at));
                    }
                }
            }
        }
        out.extend(stacked);
        Ok(out)
    }

    /// What the steps make of a record's features (`Decoder::output`): shapes as far as
    /// they are known before reading (`None` where records may differ).
    pub fn output(&self, mut features: Vec<OutputFeature>) -> Result<Vec<OutputFeature>, String> {
        for (index, step) in self.steps.iter().enumerate() {
            let words = |message: String| {
                format!("transforms[{index}] ({}) of feature {}: {message}", step.op.name(), step.feature)
            };
            if let Op::Drop { features: dropped } = &step.op {
                features.retain(|f| !dropped.contains(&f.name));
                continue;
            }
            let Some(input) = features.iter().find(|f| f.name == step.feature) else {
                let names: Vec<&str> = features.iter().map(|f| f.name.as_str()).collect();
                return Err(words(format!("no such feature (the decoder gives {})", names.join(", "))));
            };
            if !matches!(input.kind, OutputKind::Dense | OutputKind::PaddedDense) || input.steps {
                return Err(words(format!("transforms read dense features; this one is {}", input.describe())));
            }
            let (dtype, shape) = output_of(&step.op, input.dtype, &input.shape).map_err(words)?;
            let feature =
                OutputFeature { name: step.output.clone(), kind: OutputKind::Dense, dtype, shape, steps: false };
            match features.iter_mut().find(|f| f.name == step.output) {
                Some(slot) => *slot = feature,
                None => features.push(feature),
            }
        }
        Ok(features)
    }
}

/// Runs one operation on one record's tensor.
fn run(op: &Op, input: &Dense, draws: &mut Draws, max_image_pixels: u64) -> Result<Dense, String> {
    match op {
        Op::Slice { begin, size } => array::slice(input, begin, size),
        Op::Reshape { shape } => array::reshape(input, shape),
        Op::Transpose { perm } => array::transpose(input, perm),
        Op::Cast { dtype } => array::cast(input, *dtype),
        Op::Scale { multiply, add } => array::scale(input, *multiply, *add),
        Op::Drop { .. } => unreachable!("applied by the caller"),
        Op::DecodeRaw { out_type, little_endian } => array::decode_raw_feature(input, *out_type, *little_endian),
        Op::DecodeImage { channels } => {
            let contents = match (&input.values, input.shape.as_slice()) {
                (crate::decode::Values::Strings(strings), []) => &strings[0],
                _ => {
                    return Err(format!(
                        "decodeImage reads a string scalar, not {} {:?}",
                        input.dtype.name(),
                        input.shape
                    ));
                }
            };
            image_decode::decode_image(contents, *channels, max_image_pixels)
        }
        Op::Resize { height, width, method } => {
            each_image(input, Ranks::Images, |image| resize::resize(image, *height, *width, *method))
        }
        Op::CentralCrop { fraction } => {
            each_image(input, Ranks::AtLeastThree, |image| image::central_crop(image, *fraction))
        }
        Op::ResizeWithCropOrPad { height, width } => {
            each_image(input, Ranks::ThreeOrFour, |image| image::resize_with_crop_or_pad(image, *height, *width))
        }
        Op::ConvertImageDtype { dtype, saturate } => image::convert_image_dtype(input, *dtype, *saturate),
        Op::Normalize { mean, std } => image::normalize(input, mean, std),
        Op::PerImageStandardization => each_image(input, Ranks::AtLeastThree, image::per_image_standardization),
        Op::FlipLeftRight => each_image(input, Ranks::AtLeastThree, |image| image::flip(image, true)),
        Op::FlipUpDown => each_image(input, Ranks::AtLeastThree, |image| image::flip(image, false)),
        Op::AdjustBrightness { delta } => image::adjust_brightness(input, *delta),
        Op::AdjustContrast { factor } => {
            each_image(input, Ranks::AtLeastThree, |image| image::adjust_contrast(image, *factor))
        }
        Op::RandomCrop { size } => random_crop(input, size, draws),
        Op::RandomResizedCrop { height, width, sampling, channels, fast } => {
            if let (crate::decode::Values::Strings(strings), []) = (&input.values, input.shape.as_slice()) {
                return random_resized_crop_encoded(
                    &strings[0],
                    (*channels, *fast),
                    (*height, *width),
                    sampling,
                    draws,
                    max_image_pixels,
                );
            }
            let (h, w, _) = image::hwc(input).map_err(|_| {
                format!("'image' (shape {}) must be three-dimensional.", image::shape_words(&input.shape))
            })?;
            let crop = random::sample_box(sampling, h, w, draws);
            let fused =
                resize::crop_and_resize_bilinear(input, crop.top, crop.left, crop.height, crop.width, *height, *width);
            match fused {
                Some(resized) => Ok(resized),
                None => {
                    let cropped = image::crop(input, crop.top, crop.left, crop.height, crop.width);
                    resize::resize(&cropped, *height, *width, Method::Bilinear)
                }
            }
        }
        Op::RandomFlipLeftRight | Op::RandomFlipUpDown => {
            let horizontal = matches!(op, Op::RandomFlipLeftRight);
            each_image(input, Ranks::AtLeastThree, |image| {
                if draws.unit() < 0.5 { image::flip(image, horizontal) } else { Ok(image.clone()) }
            })
        }
        Op::RandomBrightness { max_delta } => {
            let delta = draws.uniform(-*max_delta as f32, *max_delta as f32);
            image::adjust_brightness(input, f64::from(delta))
        }
        Op::RandomContrast { lower, upper } => {
            // One factor for the element: every image of a batch [n, h, w, c] takes it.
            let factor = f64::from(draws.uniform(*lower as f32, *upper as f32));
            each_image(input, Ranks::AtLeastThree, |image| image::adjust_contrast(image, factor))
        }
    }
}

/// `randomResizedCrop` of an encoded image: a JPEG's box sampled from its header and
/// only the box decoded (`decode_and_crop_jpeg`), then resized; another format decoded
/// whole (`decode_image`), then cropped and resized.
fn random_resized_crop_encoded(
    contents: &[u8],
    (channels, fast): (u32, bool),
    (height, width): (usize, usize),
    sampling: &BoxSampling,
    draws: &mut Draws,
    max_image_pixels: u64,
) -> Result<Dense, String> {
    let Some((h, w)) = image_decode::jpeg_dimensions(contents) else {
        let decoded = image_decode::decode_image(contents, channels, max_image_pixels)?;
        let (h, w, _) = image::hwc(&decoded)?;
        let crop = random::sample_box(sampling, h, w, draws);
        return resize::crop_and_resize_bilinear(&decoded, crop.top, crop.left, crop.height, crop.width, height, width)
            .ok_or_else(|| "an empty image".to_owned());
    };
    let crop = random::sample_box(sampling, h, w, draws);
    let window = (crop.top, crop.left, crop.height, crop.width);
    // `fast`: the largest IDCT scaling that leaves the box at least the output's size.
    let scale = match fast {
        true => [8, 4, 2].into_iter().find(|s| crop.height / s >= height && crop.width / s >= width).unwrap_or(1),
        false => 1,
    };
    let decoded = image_decode::decode_and_crop_jpeg_scaled(contents, channels, window, scale, max_image_pixels)?;
    let (box_height, box_width, _) = image::hwc(&decoded)?;
    resize::crop_and_resize_bilinear(&decoded, 0, 0, box_height, box_width, height, width)
        .ok_or_else(|| "an empty image".to_owned())
}

/// `tf.image.random_crop(value, size)`: an offset uniform over the places the box fits,
/// drawn as `random_uniform(maxval=int32.max) % (shape - size + 1)`.
fn random_crop(input: &Dense, size: &[i64], draws: &mut Draws) -> Result<Dense, String> {
    if size.len() != input.shape.len() {
        return Err(format!("Incompatible shapes: [{}] vs. [{}]", input.shape.len(), size.len()));
    }
    let fits = size.iter().zip(&input.shape).all(|(&s, &d)| s >= 0 && s as usize <= d);
    if !fits {
        let dims = |v: Vec<String>| format!("[{}]", v.join(" "));
        return Err(format!(
            "Need value.shape >= size, got {} {}",
            dims(input.shape.iter().map(usize::to_string).collect()),
            dims(size.iter().map(i64::to_string).collect())
        ));
    }
    let offsets: Vec<i64> = size
        .iter()
        .zip(&input.shape)
        .map(|(&s, &d)| i64::from(draws.below(i32::MAX as u32) % (d as u32 - s as u32 + 1)))
        .collect();
    array::slice(input, &offsets, size)
}

/// An operation's output dtype and shape for an input of `dtype` and `shape`.
fn output_of(op: &Op, dtype: DType, shape: &[Option<usize>]) -> Result<(DType, Vec<Option<usize>>), String> {
    // An image's [h, w, c], after a batch's leading dimension if it is one.
    type Leading = Vec<Option<usize>>;
    let image_shape = || -> Result<(Leading, [Option<usize>; 3]), String> {
        match shape {
            [h, w, c] => Ok((vec![], [*h, *w, *c])),
            [n, h, w, c] => Ok((vec![*n], [*h, *w, *c])),
            _ => Err(format!("an image is [height, width, channels]; this feature has rank {}", shape.len())),
        }
    };
    let with_lead = |lead: Vec<Option<usize>>, dims: [Option<usize>; 3]| -> Vec<Option<usize>> {
        lead.into_iter().chain(dims).collect()
    };
    // Floats keep their dtype; anything else becomes float32.
    let float = |dtype: DType| match dtype {
        DType::Float16 | DType::Bfloat16 | DType::Float64 => dtype,
        _ => DType::Float32,
    };
    let same = Ok((dtype, shape.to_vec()));
    match op {
        Op::Slice { begin, size } => {
            if begin.len() != shape.len() || size.len() != shape.len() {
                return Err(format!("begin and size must have {} values, the feature's rank", shape.len()));
            }
            let dims = size.iter().zip(begin).zip(shape).map(|((&s, &b), &d)| match s {
                -1 => d.and_then(|d| d.checked_sub(b.max(0) as usize)),
                s => usize::try_from(s).ok(),
            });
            Ok((dtype, dims.collect()))
        }
        Op::Reshape { shape: to } => {
            let known: Option<usize> = shape.iter().copied().product();
            let fixed: usize = to.iter().filter(|&&d| d >= 0).map(|&d| d as usize).product();
            let dims = to.iter().map(|&d| match d {
                -1 => known.and_then(|n| n.checked_div(fixed)),
                d => usize::try_from(d).ok(),
            });
            Ok((dtype, dims.collect()))
        }
        Op::Transpose { perm } => {
            if perm.is_empty() {
                return Ok((dtype, shape.iter().rev().copied().collect()));
            }
            if perm.len() != shape.len() {
                return Err(format!("perm has {} values for a feature of rank {}", perm.len(), shape.len()));
            }
            let dims = perm.iter().map(|&p| shape.get(p as usize).copied().flatten());
            Ok((dtype, dims.collect()))
        }
        Op::Cast { dtype: to } => Ok((*to, shape.to_vec())),
        Op::Scale { .. } => Ok((float(dtype), shape.to_vec())),
        Op::Drop { .. } => same,
        Op::DecodeRaw { out_type, .. } => {
            if dtype != DType::String {
                return Err(format!("decodeRaw reads a string feature, not {}", dtype.name()));
            }
            let mut dims = shape.to_vec();
            dims.push(None);
            Ok((*out_type, dims))
        }
        Op::DecodeImage { channels } => {
            if dtype != DType::String || !shape.is_empty() {
                return Err("decodeImage reads a string scalar (an encoded image a record)".to_owned());
            }
            Ok((DType::Uint8, vec![None, None, (*channels > 0).then_some(*channels as usize)]))
        }
        Op::Resize { height, width, method } => {
            let (lead, [_, _, c]) = image_shape()?;
            let out = if *method == Method::Nearest { dtype } else { DType::Float32 };
            Ok((out, with_lead(lead, [Some(*height), Some(*width), c])))
        }
        Op::CentralCrop { fraction } => {
            let (lead, [h, w, c]) = image_shape()?;
            let dim = |d: Option<usize>| {
                d.map(|d| if *fraction == 1.0 { d } else { d - 2 * ((d as f64 - d as f64 * fraction) / 2.0) as usize })
            };
            Ok((dtype, with_lead(lead, [dim(h), dim(w), c])))
        }
        Op::ResizeWithCropOrPad { height, width } => {
            let (lead, [_, _, c]) = image_shape()?;
            Ok((dtype, with_lead(lead, [Some(*height), Some(*width), c])))
        }
        Op::ConvertImageDtype { dtype: to, .. } => Ok((*to, shape.to_vec())),
        Op::Normalize { .. } | Op::PerImageStandardization => Ok((DType::Float32, shape.to_vec())),
        Op::FlipLeftRight | Op::FlipUpDown | Op::RandomFlipLeftRight | Op::RandomFlipUpDown => {
            image_shape()?;
            same
        }
        Op::AdjustBrightness { .. }
        | Op::AdjustContrast { .. }
        | Op::RandomBrightness { .. }
        | Op::RandomContrast { .. } => same,
        Op::RandomCrop { size } => Ok((dtype, size.iter().map(|&s| usize::try_from(s).ok()).collect())),
        Op::RandomResizedCrop { height, width, channels, .. } if dtype == DType::String => {
            if !shape.is_empty() {
                return Err("randomResizedCrop of an encoded image reads a string scalar".to_owned());
            }
            Ok((DType::Float32, vec![Some(*height), Some(*width), (*channels > 0).then_some(*channels as usize)]))
        }
        Op::RandomResizedCrop { height, width, .. } => {
            let (lead, [_, _, c]) = image_shape()?;
            if !lead.is_empty() {
                return Err("randomResizedCrop takes one image [height, width, channels]".to_owned());
            }
            Ok((DType::Float32, vec![Some(*height), Some(*width), c]))
        }
    }
}

/// One output feature of a batch, stacked record by record into `[n, ...]` (TensorFlow's
/// `batch` after a `map`): every record's tensor must have the first one's dtype and shape.
struct Stacking {
    name: String,
    stack: DenseStack,
}

impl Stacking {
    fn first(name: String, tensor: Tensor, records: usize) -> Self {
        let Tensor::Dense(dense) = tensor else { unreachable!("transforms give dense features") };
        Self { name, stack: DenseStack::new(&dense, records) }
    }

    /// Record `index`'s tensor, after the ones before it.
    fn push(&mut self, tensor: Tensor, index: usize) -> Result<(), String> {
        let Tensor::Dense(dense) = tensor else { unreachable!("transforms give dense features") };
        if self.stack.push(&dense) {
            return Ok(());
        }
        Err(format!(
            "Cannot batch tensors with different shapes in feature {}. First element had shape {:?} and element {index} had shape {:?}.",
            self.name,
            self.stack.part_shape(),
            dense.shape
        ))
    }

    fn finish(self) -> (String, Tensor) {
        (self.name, Tensor::Dense(self.stack.finish()))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn parse(json: &str) -> Transforms {
        let list: Vec<readerd_proto::v1::Transform> = serde_json::from_str(json).unwrap();
        crate::spec::transforms::transforms_of(&list, 42).unwrap()
    }

    /// A 400x375 JPEG of smooth gradients and edges, 4:2:0, quality 90.
    fn photo_like_jpeg() -> Bytes {
        let (width, height) = (400, 375);
        let mut pixels = Vec::with_capacity(width * height * 3);
        for y in 0..height {
            for x in 0..width {
                let edge = if (x / 50 + y / 60) % 3 == 0 { 40 } else { 0 };
                pixels.push(((x * 255 / width + edge) % 256) as u8);
                pixels.push((y * 255 / height) as u8);
                pixels.push((((x + y) * 128 / (width + height) + 64 + edge) % 256) as u8);
            }
        }
        let image = turbojpeg::Image {
            pixels: pixels.as_slice(),
            width,
            pitch: width * 3,
            height,
            format: turbojpeg::PixelFormat::RGB,
        };
        Bytes::from(turbojpeg::compress(image, 90, turbojpeg::Subsamp::Sub2x2).unwrap().to_vec())
    }

    fn floats(features: &Features) -> Vec<f32> {
        let Tensor::Dense(dense) = &features[0].1 else { panic!("dense") };
        values::floats(dense).unwrap()
    }

    #[test]
    fn a_fast_crop_is_close_to_the_exact_one_and_exact_when_the_box_is_small() {
        let jpeg = photo_like_jpeg();
        let crop = |fast: bool, size: usize| {
            parse(&format!(
                r#"[{{"randomResizedCrop": {{"feature": "jpeg", "size": [{size}, {size}], "channels": 3, "fast": {fast}}}}}]"#
            ))
        };
        let input = || vec![("jpeg".to_owned(), Tensor::Dense(Dense::strings(vec![], vec![jpeg.clone()])))];
        let (mut total, mut count, mut scaled) = (0.0f64, 0usize, 0);
        for key in 0..40 {
            let key = format!("k:{key}");
            let exact = floats(&crop(false, 64).apply(input(), 1, &key).unwrap());
            let fast = floats(&crop(true, 64).apply(input(), 1, &key).unwrap());
            assert_eq!(exact.len(), 64 * 64 * 3);
            assert_eq!(fast.len(), exact.len());
            scaled += usize::from(exact != fast);
            total += exact.iter().zip(&fast).map(|(a, b)| f64::from((a - b).abs())).sum::<f64>();
            count += exact.len();
            // A 300x300 output: no box of this image is twice that, so nothing is scaled.
            let exact = crop(false, 300).apply(input(), 1, &key).unwrap();
            assert_eq!(crop(true, 300).apply(input(), 1, &key).unwrap(), exact);
        }
        let mean = total / count as f64;
        println!("fast randomResizedCrop 64x64: {scaled} of 40 boxes scaled, mean |difference| {mean:.2} of 255");
        assert!(scaled > 20, "most boxes are at least twice 64x64: {scaled}");
        assert!(mean < 8.0, "the scaled decode stays close to the exact pixels: {mean}");
    }

    #[test]
    fn the_cifar_reader_cuts_a_record_into_a_label_and_an_image() {
        let transforms = parse(
            r#"[{"slice": {"feature": "value", "begin": [0], "size": [1], "output": "label"}},
                {"slice": {"feature": "value", "begin": [1], "size": [12], "output": "image"}},
                {"reshape": {"feature": "image", "shape": [3, 2, 2]}},
                {"transpose": {"feature": "image", "perm": [1, 2, 0]}},
                {"drop": {"features": ["value"]}}]"#,
        );
        let record: Vec<u8> = (0..13).collect();
        let value = Dense { dtype: DType::Uint8, shape: vec![13], values: crate::decode::Values::Bytes(record.into()) };
        let out = transforms.apply(vec![("value".into(), Tensor::Dense(value))], 1, "c.bin:0").unwrap();
        let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["label", "image"]);
        let Tensor::Dense(image) = &out[1].1 else { panic!() };
        assert_eq!(image.shape, vec![2, 2, 3]);
        // Pixel (0, 0) holds the first byte of each channel plane: 1, 5, 9.
        assert_eq!(values::numbers(image).unwrap()[..3], [1, 5, 9].map(values::Number::Int));
        let schema = transforms.output(vec![OutputFeature::dense("value", DType::Uint8, &[13])]).unwrap();
        assert_eq!(
            schema.iter().map(|f| (f.name.as_str(), f.shape.clone())).collect::<Vec<_>>(),
            [("label", vec![Some(1)]), ("image", vec![Some(2), Some(2), Some(3)])]
        );
    }

    #[test]
    fn a_batch_is_cut_into_records_transformed_and_stacked_with_other_features_untouched() {
        let transforms = parse(
            r#"[{"randomFlipLeftRight": {"feature": "image"}}, {"cast": {"feature": "image", "dtype": "FLOAT32", "output": "f"}}]"#,
        );
        let image = Dense::int64(vec![2, 1, 2, 1], &[1, 2, 3, 4]);
        let label = Dense::int64(vec![2], &[7, 8]);
        let batch = vec![("label".into(), Tensor::Dense(label.clone())), ("image".into(), Tensor::Dense(image))];
        let out = transforms.apply_batch(batch, &[("a:0", 1), ("a:1", 1)]).unwrap();
        let names: Vec<&str> = out.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["label", "image", "f"]);
        assert_eq!(out[0].1, Tensor::Dense(label));
        let Tensor::Dense(f) = &out[2].1 else { panic!() };
        assert_eq!((f.dtype, f.shape.clone()), (DType::Float32, vec![2, 1, 2, 1]));
        // Each record's draw is its own, the same however it is batched.
        let alone = transforms
            .apply(vec![("image".into(), Tensor::Dense(Dense::int64(vec![1, 2, 1], &[3, 4])))], 1, "a:1")
            .unwrap();
        let Tensor::Dense(Dense { values, .. }) = &alone[0].1 else { panic!() };
        let Tensor::Dense(batched) = &out[1].1 else { panic!() };
        assert_eq!(batched.unstack().unwrap()[1].values, *values);
    }

    #[test]
    fn records_whose_shapes_differ_cannot_be_batched() {
        let transforms = parse(r#"[{"decodeRaw": {"feature": "s", "outType": "UINT8"}}]"#);
        let s = Dense::strings(vec![2], vec![bytes::Bytes::from_static(b"ab"), bytes::Bytes::from_static(b"abc")]);
        let err = transforms.apply_batch(vec![("s".into(), Tensor::Dense(s))], &[("a:0", 1), ("a:1", 1)]).unwrap_err();
        assert_eq!(err.record, None);
        assert_eq!(
            err.message,
            "Cannot batch tensors with different shapes in feature s. First element had shape [2] and element 1 had shape [3]."
        );
    }

    /// One random operation on `image` for 10,000 elements (keys), each output's floats.
    fn draws(json: &str, image: Dense) -> Vec<Vec<f32>> {
        let transforms = parse(json);
        (0..10_000)
            .map(|n| {
                let features = vec![("x".to_owned(), Tensor::Dense(image.clone()))];
                let out = transforms.apply(features, 1, &format!("f.tfrecord:{n}")).unwrap();
                let Tensor::Dense(dense) = &out[0].1 else { panic!() };
                values::floats(dense).unwrap()
            })
            .collect()
    }

    /// Whether `values` spread evenly over [low, high): each tenth holds 10% ± 1.5%.
    fn uniform_over(values: &[f32], low: f32, high: f32) -> bool {
        let mut tenths = [0usize; 10];
        for &v in values {
            assert!((low..high).contains(&v), "{v} outside [{low}, {high})");
            tenths[(((v - low) / (high - low)) * 10.0) as usize] += 1;
        }
        tenths.iter().all(|&n| (850..=1150).contains(&n))
    }

    #[test]
    fn random_flips_happen_half_the_time() {
        for op in ["randomFlipLeftRight", "randomFlipUpDown"] {
            let image = Dense::float32(vec![2, 2, 1], &[0.0, 1.0, 2.0, 3.0]);
            let outputs = draws(&format!(r#"[{{"{op}": {{"feature": "x"}}}}]"#), image);
            let flipped = outputs.iter().filter(|v| v[0] != 0.0).count() as f64 / outputs.len() as f64;
            assert!((0.48..=0.52).contains(&flipped), "{op}: flipped {flipped}");
        }
    }

    #[test]
    fn random_brightness_and_contrast_factors_are_uniform_over_their_ranges() {
        let deltas: Vec<f32> = draws(
            r#"[{"randomBrightness": {"feature": "x", "maxDelta": 0.5}}]"#,
            Dense::float32(vec![1, 1, 1], &[0.0]),
        )
        .into_iter()
        .map(|v| v[0])
        .collect();
        assert!(uniform_over(&deltas, -0.5, 0.5), "brightness deltas");
        // Pixels 0 and 2 around their mean 1: the first comes out as 1 - factor.
        let factors: Vec<f32> = draws(
            r#"[{"randomContrast": {"feature": "x", "lower": 0.2, "upper": 1.8}}]"#,
            Dense::float32(vec![1, 2, 1], &[0.0, 2.0]),
        )
        .into_iter()
        .map(|v| 1.0 - v[0])
        .collect();
        assert!(uniform_over(&factors, 0.2, 1.8 + 1e-6), "contrast factors");
    }

    /// What `output` says each operation gives is what it gives: dtype, and every
    /// dimension it claims to know.
    #[test]
    fn the_output_schema_is_what_the_operations_give() {
        let ops = [
            r#"{"slice": {"feature": "x", "begin": [1, 0, 0], "size": [2, -1, 3]}}"#,
            r#"{"reshape": {"feature": "x", "shape": [-1, 3]}}"#,
            r#"{"transpose": {"feature": "x", "perm": [2, 0, 1]}}"#,
            r#"{"cast": {"feature": "x", "dtype": "INT32"}}"#,
            r#"{"scale": {"feature": "x", "multiply": 0.5}}"#,
            r#"{"resize": {"feature": "x", "size": [5, 7], "method": "NEAREST"}}"#,
            r#"{"resize": {"feature": "x", "size": [5, 7], "method": "AREA"}}"#,
            r#"{"centralCrop": {"feature": "x", "fraction": 0.5}}"#,
            r#"{"resizeWithCropOrPad": {"feature": "x", "height": 9, "width": 4}}"#,
            r#"{"convertImageDtype": {"feature": "x", "dtype": "FLOAT32"}}"#,
            r#"{"normalize": {"feature": "x", "mean": [1], "std": [2]}}"#,
            r#"{"perImageStandardization": {"feature": "x"}}"#,
            r#"{"randomCrop": {"feature": "x", "size": [3, 3, 3]}}"#,
            r#"{"randomResizedCrop": {"feature": "x", "size": [4, 4]}}"#,
            r#"{"randomFlipLeftRight": {"feature": "x"}}"#,
            r#"{"randomBrightness": {"feature": "x", "maxDelta": 0.2}}"#,
            r#"{"randomContrast": {"feature": "x", "lower": 0.5, "upper": 1.5}}"#,
        ];
        let images = [
            Dense {
                dtype: DType::Uint8,
                shape: vec![6, 8, 3],
                values: crate::decode::Values::Bytes((0..144u8).collect::<Vec<_>>().into()),
            },
            values::cast_numbers(
                (0..144u32).map(|v| values::Number::Int(i128::from(v))),
                DType::Float16,
                vec![6, 8, 3],
            ),
        ];
        for image in images {
            for op in ops {
                let transforms = parse(&format!("[{op}]"));
                let schema = transforms.output(vec![OutputFeature::dense("x", image.dtype, &image.shape)]).unwrap();
                let out = transforms.apply(vec![("x".into(), Tensor::Dense(image.clone()))], 1, "k:0").unwrap();
                let Tensor::Dense(got) = &out[0].1 else { panic!() };
                assert_eq!(schema[0].dtype, got.dtype, "{op} on {:?}", image.dtype);
                assert_eq!(schema[0].shape.len(), got.shape.len(), "{op}");
                for (claimed, &dim) in schema[0].shape.iter().zip(&got.shape) {
                    assert!(
                        claimed.is_none_or(|c| c == dim),
                        "{op} on {:?}: {:?} vs {:?}",
                        image.dtype,
                        schema[0].shape,
                        got.shape
                    );
                }
            }
        }
    }

    /// `randomResizedCrop` of an encoded JPEG decodes only its box; when the box is the
    /// whole image it is what decoding the image and resizing it gives.
    #[test]
    fn a_resized_crop_of_an_encoded_jpeg_decodes_its_box_only() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/golden/transforms/images/jpeg_420_q90_48x64.jpg");
        let jpeg = Dense::strings(vec![], vec![std::fs::read(path).unwrap().into()]);
        let encoded = |json: &str| {
            let out = parse(json).apply(vec![("x".into(), Tensor::Dense(jpeg.clone()))], 1, "k:0").unwrap();
            let Tensor::Dense(image) = out.into_iter().next().unwrap().1 else { panic!() };
            image
        };
        let whole = encoded(
            r#"[{"randomResizedCrop": {"feature": "x", "size": [20, 30], "area": [1.0, 1.0], "aspectRatio": [1.3333333, 1.3333334], "channels": 3}}]"#,
        );
        let resized = encoded(
            r#"[{"decodeImage": {"feature": "x", "channels": 3}}, {"resize": {"feature": "x", "size": [20, 30]}}]"#,
        );
        assert_eq!(whole, resized);
        let cropped = encoded(
            r#"[{"randomResizedCrop": {"feature": "x", "size": [24, 24], "area": [0.1, 0.5], "channels": 3}}]"#,
        );
        assert_eq!((cropped.dtype, cropped.shape.clone()), (DType::Float32, vec![24, 24, 3]));
        let schema = parse(r#"[{"randomResizedCrop": {"feature": "x", "size": [24, 24], "channels": 3}}]"#)
            .output(vec![OutputFeature::dense("x", DType::String, &[])])
            .unwrap();
        assert_eq!(schema[0].shape, vec![Some(24), Some(24), Some(3)]);
    }
}
