//! `tf.image.resize(images, size, method, antialias=False)` on one `[h, w, c]` image, as
//! TensorFlow's kernels compute it: BILINEAR, NEAREST and BICUBIC with half-pixel centres
//! (`ResizeBilinear`, `ResizeNearestNeighbor`, `ResizeBicubic` with the Keys kernel, a =
//! -0.5, out-of-image taps weighted 0 and the rest renormalized), AREA as `ResizeArea`
//! (no half-pixel centres). Arithmetic in float32 as theirs; the output is float32, but
//! NEAREST keeps the input's dtype.

use super::image::hwc;
use super::values::{floats, gather};
use crate::decode::Dense;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Bilinear,
    Nearest,
    Bicubic,
    Area,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Bilinear => "BILINEAR",
            Method::Nearest => "NEAREST",
            Method::Bicubic => "BICUBIC",
            Method::Area => "AREA",
        }
    }
}

/// `image` resized to `height` × `width`.
pub fn resize(image: &Dense, height: usize, width: usize, method: Method) -> Result<Dense, String> {
    let (h, w, c) = match image.shape[..] {
        [_, _, _] => hwc(image)?,
        _ => return Err("'images' must have either 3 or 4 dimensions.".to_owned()),
    };
    if height == 0 || width == 0 {
        return Err(format!("output dimensions must be positive, got [{height}, {width}]"));
    }
    if h == 0 || w == 0 {
        return Err(format!("input image must be of non-zero size, got [{h}, {w}]"));
    }
    if method == Method::Nearest {
        let ys: Vec<usize> = (0..height).map(|y| nearest(y, h, height)).collect();
        let xs: Vec<usize> = (0..width).map(|x| nearest(x, w, width)).collect();
        let sources =
            ys.iter().flat_map(|&sy| xs.iter().flat_map(move |&sx| (0..c).map(move |ch| (sy * w + sx) * c + ch)));
        return Ok(gather(image, vec![height, width, c], sources));
    }
    let input = floats(image).ok_or_else(|| format!("resize takes a numeric image, not {}", image.dtype.name()))?;
    if method == Method::Bilinear {
        let window = Window { top: 0, left: 0, h, w, c, stride: w };
        return Ok(Dense::float32(vec![height, width, c], &bilinear_of(input.as_slice(), window, height, width)));
    }
    let out = match method {
        Method::Bilinear => unreachable!("above"),
        Method::Bicubic => bicubic(&input, (h, w, c), height, width),
        Method::Area => area(&input, (h, w, c), height, width),
        Method::Nearest => unreachable!("above"),
    };
    Ok(Dense::float32(vec![height, width, c], &out))
}

/// `in / out` as TensorFlow's `CalculateResizeScale` (float).
fn scale(input: usize, output: usize) -> f32 {
    input as f32 / output as f32
}

/// `HalfPixelScalerForNN`, floored and clamped.
fn nearest(out: usize, input: usize, output: usize) -> usize {
    let at = ((out as f32 + 0.5) * scale(input, output)).floor();
    (at.max(0.0) as usize).min(input - 1)
}

/// One output coordinate's two taps and the weight of the second.
struct Lerp {
    lower: usize,
    upper: usize,
    lerp: f32,
}

fn lerps(input: usize, output: usize) -> Vec<Lerp> {
    let scale = scale(input, output);
    (0..output)
        .map(|i| {
            let at = (i as f32 + 0.5) * scale - 0.5;
            let floor = at.floor();
            Lerp {
                lower: (floor as i64).max(0) as usize,
                upper: (at.ceil() as i64).min(input as i64 - 1).max(0) as usize,
                lerp: at - floor,
            }
        })
        .collect()
}

/// A window of an image's samples: `h` × `w` pixels of `c` channels at (`top`, `left`) of
/// an image `stride` pixels wide; resized as if it had been cropped first.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub top: usize,
    pub left: usize,
    pub h: usize,
    pub w: usize,
    pub c: usize,
    pub stride: usize,
}

/// A sample an image holds, read as `static_cast<float>`.
trait Sample: Copy {
    fn float(self) -> f32;
}

impl Sample for u8 {
    #[inline]
    fn float(self) -> f32 {
        f32::from(self)
    }
}

impl Sample for f32 {
    #[inline]
    fn float(self) -> f32 {
        self
    }
}

/// `ResizeBilinear` of a window, reading its samples where they are (no crop copied, no
/// conversion of the whole image to floats first). Computed as TensorFlow's kernel does,
/// `top + (bottom - top) * y_lerp` of the rows' `left + (right - left) * x_lerp`, but a
/// row at a time: each input row's horizontal interpolation once (rows shared by output
/// rows are not interpolated again), then the vertical one over whole rows. The same
/// float operations in the same order: the same results.
fn bilinear_of<T: Sample>(input: &[T], window: Window, height: usize, width: usize) -> Vec<f32> {
    let Window { top, left, h, w, c, stride } = window;
    let (ys, xs) = (lerps(h, height), lerps(w, width));
    let row_len = width * c;
    // Each output sample's two taps (sample offsets in a window row) and weight.
    let taps: Vec<(usize, usize, f32)> =
        xs.iter().flat_map(|x| (0..c).map(move |ch| (x.lower * c + ch, x.upper * c + ch, x.lerp))).collect();
    let interpolate = |row: usize, into: &mut Vec<f32>| {
        let samples = &input[((top + row) * stride + left) * c..][..w * c];
        into.clear();
        into.extend(taps.iter().map(|&(l, r, lerp)| {
            let (l, r) = (samples[l].float(), samples[r].float());
            l + (r - l) * lerp
        }));
    };
    let mut out: Vec<f32> = Vec::with_capacity(height * row_len);
    let (mut upper, mut lower) = (Vec::with_capacity(row_len), Vec::with_capacity(row_len));
    let mut rows: (Option<usize>, Option<usize>) = (None, None);
    for y in &ys {
        if rows.0 != Some(y.lower) {
            if rows.1 == Some(y.lower) {
                std::mem::swap(&mut upper, &mut lower);
                rows.1 = None;
            } else {
                interpolate(y.lower, &mut upper);
            }
            rows.0 = Some(y.lower);
        }
        if rows.1 != Some(y.upper) {
            interpolate(y.upper, &mut lower);
            rows.1 = Some(y.upper);
        }
        let lerp = y.lerp;
        out.extend(upper.iter().zip(&lower).map(|(&top, &bottom)| top + (bottom - top) * lerp));
    }
    out
}

/// The window `top`, `left`, `h` × `w` of a `[height, width, c]` uint8 or float32 image
/// resized bilinearly to `out_h` × `out_w`: what cropping then `resize` gives, float32.
pub fn crop_and_resize_bilinear(
    image: &Dense,
    top: usize,
    left: usize,
    h: usize,
    w: usize,
    out_h: usize,
    out_w: usize,
) -> Option<Dense> {
    let (stride, c) = (image.shape[1], image.shape[2]);
    let crate::decode::Values::Bytes(bytes) = &image.values else { return None };
    let window = Window { top, left, h, w, c, stride };
    if h == 0 || w == 0 {
        return None;
    }
    let bytes = match image.dtype {
        crate::decode::DType::Uint8 => bilinear_of(bytes.as_ref(), window, out_h, out_w),
        crate::decode::DType::Float32 => {
            let floats: &[[u8; 4]] = bytes.as_chunks::<4>().0;
            let floats: Vec<f32> = floats.iter().map(|b| super::values::daz(f32::from_le_bytes(*b))).collect();
            bilinear_of(floats.as_slice(), window, out_h, out_w)
        }
        _ => return None,
    };
    Some(Dense::float32(vec![out_h, out_w, c], &bytes))
}

/// Entries of the Keys cubic kernel's table (`GetCoeffsTable`).
const TABLE_SIZE: usize = 1024;

fn keys_table() -> Vec<f32> {
    const A: f32 = -0.5;
    let mut table = vec![0f32; (TABLE_SIZE + 1) * 2];
    for i in 0..=TABLE_SIZE {
        let mut x = (i as f64 / TABLE_SIZE as f64) as f32;
        table[i * 2] = ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0;
        x += 1.0;
        table[i * 2 + 1] = ((A * x - 5.0 * A) * x + 8.0 * A) * x - 4.0 * A;
    }
    table
}

/// One output coordinate's four taps and weights.
struct Taps {
    index: [usize; 4],
    weight: [f32; 4],
}

fn taps(input: usize, output: usize, table: &[f32]) -> Vec<Taps> {
    let scale = scale(input, output);
    let limit = input as i64;
    (0..output)
        .map(|i| {
            let at = (i as f32 + 0.5) * scale - 0.5;
            let loc = at.floor() as i64;
            let delta = at - loc as f32;
            let offset = (delta * TABLE_SIZE as f32).round_ties_even() as usize;
            let coefficient = [
                table[offset * 2 + 1],
                table[offset * 2],
                table[(TABLE_SIZE - offset) * 2],
                table[(TABLE_SIZE - offset) * 2 + 1],
            ];
            let mut index = [0usize; 4];
            let mut weight = [0f32; 4];
            for k in 0..4 {
                let wanted = loc - 1 + k as i64;
                let bounded = wanted.clamp(0, limit - 1);
                index[k] = bounded as usize;
                weight[k] = if bounded == wanted { coefficient[k] } else { 0.0 };
            }
            let sum = weight[0] + weight[1] + weight[2] + weight[3];
            if sum.abs() >= 1000.0 * f32::MIN_POSITIVE {
                let inverse = 1.0 / sum;
                weight.iter_mut().for_each(|w| *w *= inverse);
            }
            Taps { index, weight }
        })
        .collect()
}

fn bicubic(input: &[f32], (h, w, c): (usize, usize, usize), height: usize, width: usize) -> Vec<f32> {
    let table = keys_table();
    let (ys, xs) = (taps(h, height, &table), taps(w, width, &table));
    let combine =
        |v: [f32; 4], t: &Taps| v[0] * t.weight[0] + v[1] * t.weight[1] + v[2] * t.weight[2] + v[3] * t.weight[3];
    let mut out = Vec::with_capacity(height * width * c);
    for y in &ys {
        for x in &xs {
            for ch in 0..c {
                let row = |r: usize| {
                    let at = |col: usize| input[(r * w + col) * c + ch];
                    combine([at(x.index[0]), at(x.index[1]), at(x.index[2]), at(x.index[3])], x)
                };
                out.push(combine([row(y.index[0]), row(y.index[1]), row(y.index[2]), row(y.index[3])], y));
            }
        }
    }
    out
}

/// The input cells an output cell of `ResizeArea` covers, with their shares.
fn spans(input: usize, output: usize) -> Vec<Vec<(usize, f32)>> {
    let scale = scale(input, output);
    (0..output)
        .map(|i| {
            let start = i as f32 * scale;
            let end = (i + 1) as f32 * scale;
            let (first, last) = (start.floor() as i64, end.ceil() as i64);
            (first..last)
                .map(|j| {
                    let jf = j as f32;
                    let share = if jf < start {
                        if jf + 1.0 > end { scale } else { jf + 1.0 - start }
                    } else if jf + 1.0 > end {
                        end - jf
                    } else {
                        1.0
                    };
                    ((j.max(0) as usize).min(input - 1), share)
                })
                .collect()
        })
        .collect()
}

fn area(input: &[f32], (h, w, c): (usize, usize, usize), height: usize, width: usize) -> Vec<f32> {
    let (ys, xs) = (spans(h, height), spans(w, width));
    let norm = 1.0 / (scale(h, height) * scale(w, width));
    let mut out = Vec::with_capacity(height * width * c);
    for y in &ys {
        for x in &xs {
            for ch in 0..c {
                let mut sum_y = 0f32;
                for &(row, share_y) in y {
                    let mut sum_x = 0f32;
                    for &(col, share_x) in x {
                        sum_x += input[(row * w + col) * c + ch] * share_x;
                    }
                    sum_y += sum_x * share_y;
                }
                out.push(sum_y * norm);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resizing_to_the_same_size_keeps_the_pixels() {
        let image = Dense::float32(vec![2, 3, 1], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        for method in [Method::Bilinear, Method::Nearest, Method::Bicubic, Method::Area] {
            assert_eq!(resize(&image, 2, 3, method).unwrap(), image, "{method:?}");
        }
    }

    #[test]
    fn bilinear_upscaling_interpolates_between_half_pixel_centres() {
        let image = Dense::float32(vec![1, 2, 1], &[0.0, 4.0]);
        // Output x = 1 of 4 sits at input 0.25 (clamped below at 0): 0 + 4 * 0.25 = 1.
        assert_eq!(
            resize(&image, 1, 4, Method::Bilinear).unwrap(),
            Dense::float32(vec![1, 4, 1], &[0.0, 1.0, 3.0, 4.0])
        );
    }

    #[test]
    fn a_window_resized_in_place_is_the_crop_resized() {
        let (h, w, c) = (23, 31, 3);
        let bytes: Vec<u8> = (0..h * w * c).map(|i| (i * 37 % 251) as u8).collect();
        let u8_image = Dense {
            dtype: crate::decode::DType::Uint8,
            shape: vec![h, w, c],
            values: crate::decode::Values::Bytes(bytes.clone().into()),
        };
        let floats: Vec<f32> = bytes.iter().map(|&b| f32::from(b) * 0.37).collect();
        let f32_image = Dense::float32(vec![h, w, c], &floats);
        for image in [u8_image, f32_image] {
            for (top, left, ch, cw, oh, ow) in
                [(0, 0, 23, 31, 7, 9), (3, 5, 10, 17, 24, 24), (22, 30, 1, 1, 4, 4), (2, 0, 21, 31, 23, 31)]
            {
                let cropped = super::super::image::crop(&image, top, left, ch, cw);
                let want = resize(&cropped, oh, ow, Method::Bilinear).unwrap();
                let got = crop_and_resize_bilinear(&image, top, left, ch, cw, oh, ow).unwrap();
                assert_eq!(got, want, "{:?} window {top},{left} {ch}x{cw} to {oh}x{ow}", image.dtype);
            }
        }
    }
}
