//! Image operations on one `[height, width, channels]` tensor, as `tf.image` defines them:
//! crops and pads, flips, `convert_image_dtype`, brightness, contrast, standardization and
//! a per-channel normalization. Resizing is in [`super::resize`].

use super::values::{Number, box_indices, cast_numbers, floats, gather, int_of, numbers};
use crate::decode::{DType, Dense};

/// `[height, width, channels]` of an image, or TensorFlow's message for another rank.
pub fn hwc(image: &Dense) -> Result<(usize, usize, usize), String> {
    match image.shape[..] {
        [h, w, c] => Ok((h, w, c)),
        _ => Err(format!("'image' (shape {}) must be three-dimensional.", shape_words(&image.shape))),
    }
}

/// What a rank other than an image's (3) or a batch of images' (4) is told.
#[derive(Clone, Copy, Debug)]
pub enum Ranks {
    /// `'image' (shape (5, 7)) must be at least three-dimensional.`
    AtLeastThree,
    /// `'image' (shape (5, 7)) must have either 3 or 4 dimensions.`
    ThreeOrFour,
    /// `'images' must have either 3 or 4 dimensions.` (resizes)
    Images,
}

/// `op` on an image `[h, w, c]`, or on each image of a batch `[n, h, w, c]` (then
/// stacked again), as `tf.image`'s ops take either.
pub fn each_image(
    image: &Dense,
    ranks: Ranks,
    mut op: impl FnMut(&Dense) -> Result<Dense, String>,
) -> Result<Dense, String> {
    match image.shape.len() {
        3 => op(image),
        4 if image.shape[0] > 0 => {
            let images = image.unstack().expect("rank 4");
            let out = images.iter().map(&mut op).collect::<Result<Vec<_>, _>>()?;
            Dense::stack(&out).ok_or_else(|| "the images of a batch came out in different shapes".to_owned())
        }
        4 => Err("an empty batch of images".to_owned()),
        _ => Err(match ranks {
            Ranks::AtLeastThree => {
                format!("'image' (shape {}) must be at least three-dimensional.", shape_words(&image.shape))
            }
            Ranks::ThreeOrFour => {
                format!("'image' (shape {}) must have either 3 or 4 dimensions.", shape_words(&image.shape))
            }
            Ranks::Images => "'images' must have either 3 or 4 dimensions.".to_owned(),
        }),
    }
}

/// A shape as Python prints a TensorShape: `(32, 32)`.
pub fn shape_words(shape: &[usize]) -> String {
    match shape {
        [one] => format!("({one},)"),
        _ => format!("({})", shape.iter().map(usize::to_string).collect::<Vec<_>>().join(", ")),
    }
}

/// The box of `height` × `width` at (`top`, `left`), every channel: row by row.
pub fn crop(image: &Dense, top: usize, left: usize, height: usize, width: usize) -> Dense {
    let (w, c) = (image.shape[1], image.shape[2]);
    let size = [height, width, c];
    let Some((bytes, pixel)) = pixel_bytes(image) else {
        return gather(image, size.to_vec(), box_indices(&image.shape, &[top, left, 0], &size));
    };
    let mut out = Vec::with_capacity(height * width * pixel);
    for y in top..top + height {
        let start = (y * w + left) * pixel;
        out.extend_from_slice(&bytes[start..start + width * pixel]);
    }
    Dense { dtype: image.dtype, shape: size.to_vec(), values: crate::decode::Values::Bytes(out.into()) }
}

/// A numeric image's bytes and the bytes of one pixel (all its channels).
fn pixel_bytes(image: &Dense) -> Option<(&bytes::Bytes, usize)> {
    match &image.values {
        crate::decode::Values::Bytes(bytes) => Some((bytes, image.shape[2] * image.dtype.size()?)),
        crate::decode::Values::Strings(_) => None,
    }
}

/// `tf.image.central_crop(image, fraction)`.
pub fn central_crop(image: &Dense, fraction: f64) -> Result<Dense, String> {
    if fraction <= 0.0 || fraction > 1.0 {
        return Err("central_fraction must be within (0, 1]".to_owned());
    }
    let (h, w, _) = hwc(image)?;
    if fraction == 1.0 {
        return Ok(image.clone());
    }
    let start = |dim: usize| ((dim as f64 - dim as f64 * fraction) / 2.0) as usize;
    let (top, left) = (start(h), start(w));
    Ok(crop(image, top, left, h - 2 * top, w - 2 * left))
}

/// `tf.image.resize_with_crop_or_pad(image, height, width)`: centred, cropped where larger
/// and padded with zeros where smaller.
pub fn resize_with_crop_or_pad(image: &Dense, height: usize, width: usize) -> Result<Dense, String> {
    let (h, w, c) = hwc(image)?;
    if height == 0 {
        return Err("target_height must be > 0.".to_owned());
    }
    if width == 0 {
        return Err("target_width must be > 0.".to_owned());
    }
    let crop_top = h.saturating_sub(height) / 2;
    let crop_left = w.saturating_sub(width) / 2;
    let pad_top = height.saturating_sub(h) / 2;
    let pad_left = width.saturating_sub(w) / 2;
    let (kept_h, kept_w) = (h.min(height), w.min(width));
    let cropped = crop(image, crop_top, crop_left, kept_h, kept_w);
    if kept_h == height && kept_w == width {
        return Ok(cropped);
    }
    // Padding: a zero element (an empty string for strings) wherever the crop is not.
    let mut padded = Vec::with_capacity(height * width * c);
    let zero = cropped.num_elements();
    let mut with_zero = cropped.clone();
    append_zero(&mut with_zero);
    for y in 0..height {
        for x in 0..width {
            let inside = (pad_top..pad_top + kept_h).contains(&y) && (pad_left..pad_left + kept_w).contains(&x);
            for ch in 0..c {
                padded.push(if inside { ((y - pad_top) * kept_w + (x - pad_left)) * c + ch } else { zero });
            }
        }
    }
    Ok(gather(&with_zero, vec![height, width, c], padded.into_iter()))
}

/// `dense` with one more element, a zero, at its end (its shape no longer describes it).
fn append_zero(dense: &mut Dense) {
    match &mut dense.values {
        crate::decode::Values::Bytes(bytes) => {
            let mut grown = bytes.to_vec();
            grown.resize(grown.len() + dense.dtype.size().expect("numeric"), 0);
            *bytes = grown.into();
        }
        crate::decode::Values::Strings(strings) => strings.push(bytes::Bytes::new()),
    }
}

/// `tf.image.flip_left_right` (`horizontal`) or `flip_up_down`.
/// [`flip`] of an image this caller holds alone: in place when its buffer is not shared
/// (a transform's own output), else copied.
pub fn flip_owned(image: Dense, horizontal: bool) -> Result<Dense, String> {
    let (h, w, _) = hwc(&image)?;
    let Some((_, pixel)) = pixel_bytes(&image) else { return flip(&image, horizontal) };
    let Dense { dtype, shape, values } = image;
    let crate::decode::Values::Bytes(bytes) = values else { unreachable!("pixel_bytes: numeric") };
    match bytes.try_into_mut() {
        Ok(mut pixels) => {
            let row = w * pixel;
            if horizontal {
                for line in pixels.chunks_exact_mut(row.max(1)) {
                    reverse_pixels(line, pixel);
                }
            } else {
                for y in 0..h / 2 {
                    let (upper, lower) = pixels.split_at_mut((h - 1 - y) * row);
                    upper[y * row..(y + 1) * row].swap_with_slice(&mut lower[..row]);
                }
            }
            Ok(Dense { dtype, shape, values: crate::decode::Values::Bytes(pixels.freeze()) })
        }
        Err(shared) => flip(&Dense { dtype, shape, values: crate::decode::Values::Bytes(shared) }, horizontal),
    }
}

/// Reverses the order of the `pixel`-byte pixels of `line` in place. The common pixel
/// sizes (one to four channels of u8, three or four of float32) swap fixed-size arrays,
/// which the compiler turns into a few moves a pixel.
fn reverse_pixels(line: &mut [u8], pixel: usize) {
    fn fixed<const N: usize>(line: &mut [u8]) {
        line.as_chunks_mut::<N>().0.reverse();
    }
    match pixel {
        1 => line.reverse(),
        2 => fixed::<2>(line),
        3 => fixed::<3>(line),
        4 => fixed::<4>(line),
        12 => fixed::<12>(line),
        16 => fixed::<16>(line),
        _ => {
            let w = line.len() / pixel.max(1);
            for x in 0..w / 2 {
                let (left, right) = line.split_at_mut((w - 1 - x) * pixel);
                left[x * pixel..(x + 1) * pixel].swap_with_slice(&mut right[..pixel]);
            }
        }
    }
}

pub fn flip(image: &Dense, horizontal: bool) -> Result<Dense, String> {
    let (h, w, c) = hwc(image)?;
    if let Some((bytes, pixel)) = pixel_bytes(image) {
        let row = w * pixel;
        let mut out = Vec::with_capacity(bytes.len());
        for y in 0..h {
            if horizontal {
                let line = &bytes[y * row..(y + 1) * row];
                line.rchunks_exact(pixel.max(1)).for_each(|p| out.extend_from_slice(p));
            } else {
                out.extend_from_slice(&bytes[(h - 1 - y) * row..(h - y) * row]);
            }
        }
        return Ok(Dense {
            dtype: image.dtype,
            shape: image.shape.clone(),
            values: crate::decode::Values::Bytes(out.into()),
        });
    }
    let sources = (0..h).flat_map(move |y| {
        (0..w).flat_map(move |x| {
            let (sy, sx) = if horizontal { (y, w - 1 - x) } else { (h - 1 - y, x) };
            (0..c).map(move |ch| (sy * w + sx) * c + ch)
        })
    });
    Ok(gather(image, image.shape.clone(), sources))
}

/// The largest value of an integer image dtype (`dtype.max`).
fn int_max(dtype: DType) -> Option<i128> {
    Some(match dtype {
        DType::Uint8 => 255,
        DType::Int8 => 127,
        DType::Uint16 => 65_535,
        DType::Int16 => 32_767,
        DType::Int32 => i32::MAX as i128,
        DType::Int64 => i64::MAX as i128,
        _ => return None,
    })
}

fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::Float16 | DType::Bfloat16 | DType::Float32 | DType::Float64)
}

/// `tf.image.convert_image_dtype(image, dtype, saturate)`: integers scale to [0, 1] in
/// floats (`x * (1 / max)`), floats to integers as `x * (max + 0.5)` then cast (clamped
/// first with `saturate`), integers to integers by a power-of-two factor.
pub fn convert_image_dtype(image: &Dense, dtype: DType, saturate: bool) -> Result<Dense, String> {
    let from = image.dtype;
    if from == dtype {
        return Ok(image.clone());
    }
    let values =
        numbers(image).ok_or_else(|| format!("convertImageDtype takes a numeric image, not {}", from.name()))?;
    let shape = image.shape.clone();
    let out_max = int_max(dtype);
    match (int_max(from), out_max) {
        (Some(in_max), Some(out_max)) => {
            if in_max > out_max {
                let scale = (in_max + 1) / (out_max + 1);
                let scaled = values.into_iter().map(|v| Number::Int(int_floor_div(v, scale)));
                Ok(if saturate {
                    saturate_cast(scaled, dtype, shape)
                } else {
                    cast_numbers(scaled.collect::<Vec<_>>().into_iter(), dtype, shape)
                })
            } else {
                let scale = (out_max + 1) / (in_max + 1);
                let cast = if saturate {
                    saturate_cast(values.into_iter(), dtype, shape.clone())
                } else {
                    cast_numbers(values.into_iter(), dtype, shape.clone())
                };
                let cast = numbers(&cast).expect("numeric");
                Ok(cast_numbers(cast.into_iter().map(|v| Number::Int(int_of(v) * scale)), dtype, shape))
            }
        }
        (Some(in_max), None) if is_float(dtype) => {
            // cast, then multiply by the float of 1 / max (in the output dtype).
            let cast = numbers(&cast_numbers(values.into_iter(), dtype, shape.clone())).expect("numeric");
            Ok(float_op(cast, dtype, shape, |x| x * (1.0 / in_max as f64), |x| x * (1.0 / in_max as f64) as f32))
        }
        (None, Some(out_max)) if is_float(from) => {
            let scale = out_max as f64 + 0.5;
            let scaled = float_values(values, from, |x| x * scale, |x| x * scale as f32);
            Ok(if saturate {
                saturate_cast(scaled.into_iter(), dtype, shape)
            } else {
                cast_numbers(scaled.into_iter(), dtype, shape)
            })
        }
        (None, None) if is_float(from) && is_float(dtype) => Ok(cast_numbers(values.into_iter(), dtype, shape)),
        _ => Err(format!("convertImageDtype cannot convert {} to {}", from.name(), dtype.name())),
    }
}

fn int_floor_div(value: Number, by: i128) -> i128 {
    int_of(value).div_euclid(by)
}

/// Each value of a tensor of `dtype` mapped in that dtype's arithmetic: float32 (and the
/// half types, which TensorFlow computes through float32 here) by `f32`, float64 by `f`.
fn float_values(values: Vec<Number>, dtype: DType, f: impl Fn(f64) -> f64, f32: impl Fn(f32) -> f32) -> Vec<Number> {
    match dtype {
        DType::Float64 => values.into_iter().map(|v| Number::Float(f(v.as_f64()))).collect(),
        _ => values.into_iter().map(|v| Number::Float(f64::from(f32(v.as_f32())))).collect(),
    }
}

fn float_op(
    values: Vec<Number>,
    dtype: DType,
    shape: Vec<usize>,
    f: impl Fn(f64) -> f64,
    f32: impl Fn(f32) -> f32,
) -> Dense {
    let out = float_values(values, dtype, f, f32);
    cast_numbers(out.into_iter(), dtype, shape)
}

/// `tf.dtypes.saturate_cast`: clamped to the dtype's range, then cast.
fn saturate_cast(values: impl Iterator<Item = Number>, dtype: DType, shape: Vec<usize>) -> Dense {
    let (lo, hi) = match dtype {
        DType::Uint8 => (0, 255),
        DType::Int8 => (-128, 127),
        DType::Uint16 => (0, 65_535),
        DType::Int16 => (-32_768, 32_767),
        DType::Int32 => (i32::MIN as i128, i32::MAX as i128),
        DType::Int64 => (i64::MIN as i128, i64::MAX as i128),
        _ => return cast_numbers(values.collect::<Vec<_>>().into_iter(), dtype, shape),
    };
    let clamped: Vec<Number> = values
        .map(|v| match v {
            Number::Int(i) => Number::Int(i.clamp(lo, hi)),
            Number::Float(f) => Number::Float(f.clamp(lo as f64, hi as f64)),
        })
        .collect();
    cast_numbers(clamped.into_iter(), dtype, shape)
}

/// The float image an adjustment works on: float16 and float32 as they are, anything else
/// through `convert_image_dtype(image, float32)`; and the dtype to return to.
fn float_image(image: &Dense) -> Result<(Dense, DType), String> {
    let dtype = image.dtype;
    if matches!(dtype, DType::Float16 | DType::Float32) {
        return Ok((image.clone(), dtype));
    }
    Ok((convert_image_dtype(image, DType::Float32, false)?, dtype))
}

/// `tf.image.adjust_brightness(image, delta)`.
pub fn adjust_brightness(image: &Dense, delta: f64) -> Result<Dense, String> {
    let (flt, dtype) = float_image(image)?;
    let values = numbers(&flt).expect("numeric");
    let adjusted = float_op(values, flt.dtype, flt.shape.clone(), |x| x + delta, |x| x + delta as f32);
    convert_image_dtype(&adjusted, dtype, true)
}

/// `tf.image.adjust_contrast(image, factor)`: each channel's mean over the image,
/// `(x - mean) * factor + mean`.
pub fn adjust_contrast(image: &Dense, factor: f64) -> Result<Dense, String> {
    if image.shape.len() < 3 {
        return Err(format!("input must be at least 3-D, got shape[{}]", shape_list(&image.shape)));
    }
    let (flt, dtype) = float_image(image)?;
    let (h, w, c) = hwc(&flt)?;
    let values = floats(&flt).expect("numeric");
    let mut means = vec![0f32; c];
    for (ch, mean) in means.iter_mut().enumerate() {
        let sum: f64 = (0..h * w).map(|p| f64::from(values[p * c + ch])).sum();
        *mean = (sum / (h * w).max(1) as f64) as f32;
    }
    let factor = factor as f32;
    let out: Vec<f32> = values.iter().enumerate().map(|(i, &x)| (x - means[i % c]) * factor + means[i % c]).collect();
    let adjusted = cast_numbers(out.into_iter().map(|x| Number::Float(f64::from(x))), flt.dtype, flt.shape.clone());
    convert_image_dtype(&adjusted, dtype, true)
}

fn shape_list(shape: &[usize]) -> String {
    shape.iter().map(usize::to_string).collect::<Vec<_>>().join(",")
}

/// `tf.image.per_image_standardization`: float32, `(x - mean) / max(stddev, 1/sqrt(n))`
/// over the whole image.
pub fn per_image_standardization(image: &Dense) -> Result<Dense, String> {
    if image.shape.len() < 3 {
        return Err(format!("'image' (shape {}) must be at least three-dimensional.", shape_words(&image.shape)));
    }
    let values = floats(image)
        .ok_or_else(|| format!("perImageStandardization takes a numeric image, not {}", image.dtype.name()))?;
    let n = values.len().max(1);
    let mean = (values.iter().map(|&x| f64::from(x)).sum::<f64>() / n as f64) as f32;
    let variance = (values.iter().map(|&x| f64::from((x - mean) * (x - mean))).sum::<f64>() / n as f64) as f32;
    let stddev = variance.sqrt();
    let min_stddev = 1.0 / (n as f32).sqrt();
    let adjusted = stddev.max(min_stddev);
    let out: Vec<f32> = values.iter().map(|&x| (x - mean) / adjusted).collect();
    Ok(Dense::float32(image.shape.clone(), &out))
}

/// `(x - mean) / std` per channel (the last dimension), in float32; a single mean or
/// std applies to every channel.
pub fn normalize(image: &Dense, mean: &[f64], std: &[f64]) -> Result<Dense, String> {
    let channels = *image.shape.last().ok_or("normalize takes a tensor of rank 1 or more")?;
    for list in [mean, std] {
        if list.len() != 1 && list.len() != channels {
            let dims: Vec<String> = image.shape.iter().map(usize::to_string).collect();
            return Err(format!("Incompatible shapes: [{}] vs. [{}]", dims.join(","), list.len()));
        }
    }
    let values =
        floats(image).ok_or_else(|| format!("normalize takes a numeric feature, not {}", image.dtype.name()))?;
    let at = |list: &[f64], ch: usize| list[if list.len() == 1 { 0 } else { ch }] as f32;
    let out: Vec<f32> = values
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let ch = i % channels.max(1);
            (x - at(mean, ch)) / at(std, ch)
        })
        .collect();
    Ok(Dense::float32(image.shape.clone(), &out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Values;

    #[test]
    fn pixels_of_every_size_are_reversed_whole() {
        for pixel in [1, 2, 3, 4, 6, 8, 12, 16] {
            for width in [0, 1, 2, 5, 224] {
                let line: Vec<u8> = (0..width * pixel).map(|i| (i * 7 % 251) as u8).collect();
                let expected: Vec<u8> = line.rchunks_exact(pixel).flatten().copied().collect();
                let mut reversed = line.clone();
                reverse_pixels(&mut reversed, pixel);
                assert_eq!(reversed, expected, "{width} pixels of {pixel} bytes");
            }
        }
    }

    fn u8_image(h: usize, w: usize, c: usize, values: &[u8]) -> Dense {
        Dense {
            dtype: DType::Uint8,
            shape: vec![h, w, c],
            values: Values::Bytes(bytes::Bytes::copy_from_slice(values)),
        }
    }

    #[test]
    fn crops_pads_and_flips_move_pixels() {
        let image = u8_image(2, 3, 1, &[1, 2, 3, 4, 5, 6]);
        assert_eq!(flip(&image, true).unwrap(), u8_image(2, 3, 1, &[3, 2, 1, 6, 5, 4]));
        assert_eq!(flip(&image, false).unwrap(), u8_image(2, 3, 1, &[4, 5, 6, 1, 2, 3]));
        assert_eq!(resize_with_crop_or_pad(&image, 2, 1).unwrap(), u8_image(2, 1, 1, &[2, 5]));
        assert_eq!(
            resize_with_crop_or_pad(&image, 4, 3).unwrap(),
            u8_image(4, 3, 1, &[0, 0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 0])
        );
    }

    #[test]
    fn a_flip_in_place_is_the_flip() {
        let values: Vec<u8> = (0..5 * 7 * 3).map(|v| v as u8).collect();
        for horizontal in [true, false] {
            let owned = u8_image(5, 7, 3, &values);
            let shared = owned.clone(); // the buffer shared: copied
            assert_eq!(flip_owned(u8_image(5, 7, 3, &values), horizontal).unwrap(), flip(&owned, horizontal).unwrap());
            assert_eq!(flip_owned(shared, horizontal).unwrap(), flip(&owned, horizontal).unwrap());
            let unique = Dense { values: Values::Bytes(values.to_vec().into()), ..owned.clone() };
            assert_eq!(flip_owned(unique, horizontal).unwrap(), flip(&owned, horizontal).unwrap(), "in place");
        }
    }

    #[test]
    fn convert_image_dtype_scales_and_saturates() {
        let image = u8_image(1, 1, 2, &[0, 255]);
        let float = convert_image_dtype(&image, DType::Float32, false).unwrap();
        assert_eq!(float, Dense::float32(vec![1, 1, 2], &[0.0, 1.0]));
        let over = Dense::float32(vec![1, 1, 2], &[-0.5, 1.5]);
        assert_eq!(convert_image_dtype(&over, DType::Uint8, true).unwrap(), u8_image(1, 1, 2, &[0, 255]));
    }
}
