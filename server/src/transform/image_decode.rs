//! `tf.io.decode_image(contents, channels, expand_animations=False)`: JPEG, PNG, GIF (the
//! first frame) and BMP to uint8 `[height, width, channels]`, told apart by their first
//! bytes as TensorFlow does.
//!
//! - JPEG is decoded by libjpeg-turbo, set as TensorFlow sets it ([`super::jpeg`]), so
//!   pixels are bit for bit its;
//! - PNG and GIF are lossless: TensorFlow's rules for channels and 16-bit samples make
//!   them exact;
//! - BMP is read here (uncompressed 24- and 32-bit, as TensorFlow's `DecodeBmp`).
//!
//! Dimensions are read from the header and checked against the pixel limit before any
//! pixel buffer is allocated: a small file claiming a huge image costs nothing.

use bytes::Bytes;

use crate::decode::{DType, Dense, Values};

/// Pixels a decoded image may have unless the server says otherwise (`--max-image-pixels`).
pub const DEFAULT_MAX_IMAGE_PIXELS: u64 = 100_000_000;

/// An image decoded: uint8 `[height, width, channels]`.
pub fn decode_image(contents: &[u8], channels: u32, max_pixels: u64) -> Result<Dense, String> {
    if !matches!(channels, 0 | 1 | 3 | 4) {
        return Err(format!("`channels` must be 0, 1, 3 or 4 but got {channels}"));
    }
    if contents.is_empty() {
        return Err("Input is empty.".to_owned());
    }
    let (height, width, out_channels, pixels) = if contents.starts_with(b"\xff\xd8\xff") {
        decode_jpeg(contents, channels, max_pixels)?
    } else if contents.starts_with(b"\x89PNG\r\n\x1a\n") {
        decode_png(contents, channels, max_pixels)?
    } else if contents.starts_with(b"GIF8") {
        decode_gif(contents, channels, max_pixels)?
    } else if contents.starts_with(b"BM") {
        decode_bmp(contents, channels, max_pixels)?
    } else {
        return Err("Unknown image file format. One of JPEG, JPEG XL, PNG, GIF, BMP, WebP required.".to_owned());
    };
    Ok(Dense {
        dtype: DType::Uint8,
        shape: vec![height, width, out_channels],
        values: Values::Bytes(Bytes::from(pixels)),
    })
}

/// Height, width, channels and the row-major pixels.
type Decoded = (usize, usize, usize, Vec<u8>);

fn check_pixels(height: usize, width: usize, max_pixels: u64) -> Result<(), String> {
    let pixels = (height as u64).saturating_mul(width as u64);
    if pixels > max_pixels {
        return Err(format!(
            "image of {width}x{height} pixels is larger than the server's limit of {max_pixels} pixels (--max-image-pixels)"
        ));
    }
    Ok(())
}

fn decode_jpeg(contents: &[u8], channels: u32, max_pixels: u64) -> Result<Decoded, String> {
    use super::jpeg::{Colorspace, Decompressor, INVALID, Pixels};
    if channels == 4 {
        return Err("JPEG does not support 4 channels".to_owned());
    }
    let mut decompressor = Decompressor::new()?;
    let header = decompressor.header(contents)?;
    check_pixels(header.height, header.width, max_pixels)?;
    let pixels = match (channels, header.colorspace) {
        (1, Colorspace::Cmyk) => return Err(INVALID.to_owned()),
        (1, _) | (0, Colorspace::Gray) => Pixels::Gray,
        (_, Colorspace::Cmyk) => Pixels::Cmyk,
        _ => Pixels::Rgb,
    };
    let decoded = decompressor.decode(contents, header, pixels)?;
    if pixels == Pixels::Cmyk {
        // CMYK (as Adobe writes it, inverted) to RGB: each ink times black.
        let rgb = decoded.chunks_exact(4).flat_map(|p| {
            let k = u32::from(p[3]);
            [p[0], p[1], p[2]].map(|ink| (u32::from(ink) * k / 255) as u8)
        });
        return Ok((header.height, header.width, 3, rgb.collect()));
    }
    Ok((header.height, header.width, pixels.channels(), decoded))
}

/// A JPEG's `(height, width)` from its header (`None`: not a JPEG, or not a valid one).
pub fn jpeg_dimensions(contents: &[u8]) -> Option<(usize, usize)> {
    if !contents.starts_with(b"\xff\xd8\xff") {
        return None;
    }
    let header = super::jpeg::Decompressor::new().ok()?.header(contents).ok()?;
    Some((header.height, header.width))
}

/// `tf.io.decode_and_crop_jpeg(contents, [top, left, height, width], channels)`: only the
/// window is decoded (see `jpeg::Decompressor::decode_window`), uint8 `[height, width, c]`.
pub fn decode_and_crop_jpeg(
    contents: &[u8],
    channels: u32,
    window: (usize, usize, usize, usize),
    max_pixels: u64,
) -> Result<Dense, String> {
    decode_and_crop_jpeg_scaled(contents, channels, window, 1, max_pixels)
}

/// [`decode_and_crop_jpeg`] of the image decoded at 1/`scale` of its size (2, 4 or 8: the
/// IDCT's own scaling; not TensorFlow's pixels), the window in the full image's
/// coordinates: uint8 `[height / scale, width / scale, c]` (at least one pixel a side)
/// of the scaled window at (`top / scale`, `left / scale`).
pub fn decode_and_crop_jpeg_scaled(
    contents: &[u8],
    channels: u32,
    (top, left, height, width): (usize, usize, usize, usize),
    scale: usize,
    max_pixels: u64,
) -> Result<Dense, String> {
    use super::jpeg::{Colorspace, Decompressor, INVALID, Pixels};
    if !matches!(channels, 0 | 1 | 3) {
        return Err(format!("channels must be 0, 1 or 3 for decode_and_crop_jpeg, got {channels}"));
    }
    let mut decompressor = Decompressor::new()?;
    let header = decompressor.header(contents)?;
    check_pixels(header.height, header.width, max_pixels)?;
    if height == 0 || width == 0 || top + height > header.height || left + width > header.width {
        return Err(format!(
            "Invalid JPEG data or crop window: window [{top}, {left}, {height}, {width}] of a {}x{} image",
            header.height, header.width
        ));
    }
    let pixels = match (channels, header.colorspace) {
        (_, Colorspace::Cmyk) => return Err(INVALID.to_owned()),
        (1, _) | (0, Colorspace::Gray) => Pixels::Gray,
        _ => Pixels::Rgb,
    };
    // In the scaled image (of TJSCALED sides, `side.div_ceil(scale)`): the window's corner
    // scaled down, its sides too, kept inside the scaled image.
    let (top, left) = (top / scale, left / scale);
    let height = (height / scale).max(1).min(header.height.div_ceil(scale) - top);
    let width = (width / scale).max(1).min(header.width.div_ceil(scale) - left);
    let decoded = decompressor.decode_window(contents, pixels, (top, left, height, width), scale)?;
    Ok(Dense {
        dtype: DType::Uint8,
        shape: vec![height, width, pixels.channels()],
        values: Values::Bytes(Bytes::from(decoded)),
    })
}

/// Gray from RGB as TensorFlow's libpng set-up computes it (`png_set_rgb_to_gray` with
/// 0.299 and 0.587: 15-bit coefficients), truncated on 8-bit samples and rounded on the
/// 16-bit samples of 16-bit files, as libpng's two paths do.
fn gray_of(r: u32, g: u32, b: u32, sixteen: bool) -> u32 {
    let sum = 9797 * r + 19234 * g + 3737 * b;
    if sixteen { (sum + 16384) >> 15 } else { sum >> 15 }
}

/// PNG as TensorFlow decodes it (`png_io.cc` on libpng): palettes and low bit depths
/// expanded; 16-bit samples keep their high byte; gray+alpha gives 2 channels with
/// `channels` 0; a tRNS chunk gives alpha to a palette, and to gray or RGB only when 4
/// channels are asked for; an alpha channel added where there is none is `2^depth - 1`
/// of the file's bit depth (15 for a 4-bit palette: libpng's filler, kept as is).
fn decode_png(contents: &[u8], channels: u32, max_pixels: u64) -> Result<Decoded, String> {
    let invalid = format!("Invalid PNG data, size {}", contents.len());
    // The decoder's own allocation limit: the largest image allowed, 16-bit RGBA.
    let limits = png::Limits { bytes: usize::try_from(max_pixels.saturating_mul(8)).unwrap_or(usize::MAX) };
    let mut decoder = png::Decoder::new_with_limits(std::io::Cursor::new(contents), limits);
    decoder.set_transformations(png::Transformations::EXPAND);
    let mut reader = decoder.read_info().map_err(|_| "Invalid PNG. Failed to initialize decoder.".to_owned())?;
    let info = reader.info();
    let (width, height) = (info.width as usize, info.height as usize);
    let (color, depth, trns) = (info.color_type, info.bit_depth as u32, info.trns.is_some());
    check_pixels(height, width, max_pixels)?;
    let (out_color, out_depth) = reader.output_color_type();
    let size = reader.output_buffer_size().ok_or_else(|| invalid.clone())?;
    let mut buffer = vec![0u8; size];
    let frame = reader.next_frame(&mut buffer).map_err(|_| invalid.clone())?;
    buffer.truncate(frame.buffer_size());
    let samples: Vec<u32> = match out_depth {
        png::BitDepth::Sixteen => buffer.chunks_exact(2).map(|s| u32::from(u16::from_be_bytes([s[0], s[1]]))).collect(),
        _ => buffer.iter().map(|&s| u32::from(s)).collect(),
    };
    let sixteen = out_depth == png::BitDepth::Sixteen;
    let from = out_color.samples();
    // Alpha that only a tRNS chunk of a gray or RGB image gave: kept for 4 channels only.
    let trns_alpha = trns && matches!(color, png::ColorType::Grayscale | png::ColorType::Rgb);
    let own = match color {
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Indexed => {
            if trns {
                4
            } else {
                3
            }
        }
    };
    let to = if channels == 0 { own } else { channels as usize };
    let filler = (1u32 << depth.min(16)) - 1;
    let filler = if sixteen { filler } else { filler.min(255) };
    let mut out = Vec::with_capacity(width * height * to);
    for p in samples.chunks_exact(from) {
        let (rgb, alpha) = match from {
            1 => ([p[0]; 3], None),
            2 => ([p[0]; 3], Some(p[1])),
            3 => ([p[0], p[1], p[2]], None),
            _ => ([p[0], p[1], p[2]], Some(p[3])),
        };
        let alpha = if trns_alpha && to != 4 { None } else { alpha };
        let is_gray = from <= 2;
        let gray = if is_gray { p[0] } else { gray_of(rgb[0], rgb[1], rgb[2], sixteen) };
        let pixel: &[u32] = match to {
            1 => &[gray],
            2 => &[gray, alpha.unwrap_or(filler)],
            3 => &rgb,
            _ => &[rgb[0], rgb[1], rgb[2], alpha.unwrap_or(filler)],
        };
        out.extend(pixel.iter().map(|&v| if sixteen { (v >> 8) as u8 } else { v as u8 }));
    }
    Ok((height, width, to, out))
}

fn decode_gif(contents: &[u8], channels: u32, max_pixels: u64) -> Result<Decoded, String> {
    if !matches!(channels, 0 | 3) {
        return Err(format!("channels must be 0 or 3 for GIF, got {channels}"));
    }
    let size = contents.len();
    // giflib's words for a file that ends early; the decoder's own for anything else.
    let invalid = |e: &dyn std::fmt::Display| {
        let words = e.to_string();
        let words = if words.contains("End of File") { "Failed to read from given file".to_owned() } else { words };
        format!("Invalid GIF data (size {size}), failed to slurp gif file: {words}")
    };
    let mut options = gif::DecodeOptions::new();
    options.set_color_output(gif::ColorOutput::Indexed);
    let mut decoder = options.read_info(std::io::Cursor::new(contents)).map_err(|e| invalid(&e))?;
    let (width, height) = (decoder.width() as usize, decoder.height() as usize);
    check_pixels(height, width, max_pixels)?;
    let global = decoder.global_palette().map(<[u8]>::to_vec);
    let frame = decoder.read_next_frame().map_err(|e| invalid(&e))?.ok_or_else(|| invalid(&"no frame"))?;
    let palette = frame.palette.clone().or(global).ok_or_else(|| invalid(&"no colour map"))?;
    // The canvas is black where the first frame does not cover it or is transparent.
    let mut canvas = vec![0u8; width * height * 3];
    let (left, top) = (usize::from(frame.left), usize::from(frame.top));
    for y in 0..usize::from(frame.height) {
        for x in 0..usize::from(frame.width) {
            let (cy, cx) = (top + y, left + x);
            if cy >= height || cx >= width {
                continue;
            }
            let index = frame.buffer[y * usize::from(frame.width) + x];
            if frame.transparent == Some(index) {
                continue;
            }
            let colour = palette.get(usize::from(index) * 3..usize::from(index) * 3 + 3).unwrap_or(&[0, 0, 0]);
            canvas[(cy * width + cx) * 3..][..3].copy_from_slice(colour);
        }
    }
    Ok((height, width, 3, canvas))
}

fn decode_bmp(contents: &[u8], channels: u32, max_pixels: u64) -> Result<Decoded, String> {
    let field = |at: usize, len: usize| -> Result<i64, String> {
        let bytes =
            contents.get(at..at + len).ok_or("Incomplete bmp content, requires at least 54 bytes".to_owned())?;
        Ok(match len {
            2 => i64::from(u16::from_le_bytes([bytes[0], bytes[1]])),
            _ => i64::from(i32::from_le_bytes(bytes.try_into().expect("4 bytes"))),
        })
    };
    let offset = field(10, 4)?;
    let width = field(18, 4)?;
    let raw_height = field(22, 4)?;
    let bits = field(28, 2)?;
    if !(1..=i64::from(i32::MAX)).contains(&width) || raw_height == 0 {
        return Err(format!("bmp image dimensions are invalid: {width}x{raw_height}"));
    }
    let height = raw_height.unsigned_abs() as usize;
    let width = width as usize;
    check_pixels(height, width, max_pixels)?;
    let source_channels = match bits {
        24 => 3,
        32 => 4,
        8 => 1,
        _ => return Err(format!("Number of channels inherent in the image must be 1, 3 or 4, was {}", bits / 8)),
    };
    if channels == 1 {
        return Err(format!("`channels` must be 0, 3 or 4 for BMP, but got {channels}"));
    }
    let out = if channels == 0 { source_channels } else { channels as usize };
    let row_bytes = (width * source_channels).div_ceil(4) * 4;
    let data = contents.get(offset.max(0) as usize..).unwrap_or_default();
    if data.len() < row_bytes * height {
        let differ = contents.len() as i64 - (offset + (row_bytes * height) as i64);
        return Err(format!(
            "Input size should match (header_size + row_size * abs_height) but they differ by {differ}"
        ));
    }
    let mut pixels = Vec::with_capacity(width * height * source_channels);
    for y in 0..height {
        // Rows are stored bottom-up unless the height is negative.
        let row = if raw_height > 0 { height - 1 - y } else { y };
        let start = row * row_bytes;
        for p in data[start..start + width * source_channels].chunks_exact(source_channels) {
            match source_channels {
                1 => pixels.push(p[0]),
                3 => pixels.extend_from_slice(&[p[2], p[1], p[0]]),
                _ => pixels.extend_from_slice(&[p[2], p[1], p[0], p[3]]),
            }
        }
    }
    if out == source_channels {
        return Ok((height, width, out, pixels));
    }
    // Alpha dropped, or added opaque; gray repeated.
    let converted = pixels.chunks_exact(source_channels).flat_map(|p| {
        let rgb = if source_channels == 1 { [p[0]; 3] } else { [p[0], p[1], p[2]] };
        let alpha = if source_channels == 4 { p[3] } else { 255 };
        [rgb[0], rgb[1], rgb[2], alpha].into_iter().take(out)
    });
    Ok((height, width, out, converted.collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_format_is_refused_with_tensorflows_message() {
        let err = decode_image(b"not an image", 0, DEFAULT_MAX_IMAGE_PIXELS).unwrap_err();
        assert_eq!(err, "Unknown image file format. One of JPEG, JPEG XL, PNG, GIF, BMP, WebP required.");
    }

    #[test]
    fn a_small_file_claiming_a_huge_image_is_refused_before_any_allocation() {
        let mut bmp = vec![0u8; 54];
        bmp[..2].copy_from_slice(b"BM");
        bmp[10..14].copy_from_slice(&54u32.to_le_bytes());
        bmp[18..22].copy_from_slice(&1_000_000i32.to_le_bytes());
        bmp[22..26].copy_from_slice(&1_000_000i32.to_le_bytes());
        bmp[28..30].copy_from_slice(&24u16.to_le_bytes());
        let err = decode_image(&bmp, 0, DEFAULT_MAX_IMAGE_PIXELS).unwrap_err();
        assert!(err.contains("larger than the server's limit"), "{err}");
    }
}
