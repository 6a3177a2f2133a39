//! JPEG decoding by libjpeg-turbo (its TurboJPEG 3 API, built from source by
//! `turbojpeg-sys`), set as TensorFlow's `decode_jpeg` sets libjpeg: its default
//! `dct_method` (`""`) is `JDCT_IFAST`, the fast integer IDCT ("sacrificing image quality
//! for speed", as its kernel says), with fancy upsampling. Same library, same settings:
//! the same pixels, bit for bit (`tests/golden`'s `image_decode` cases check it).
//!
//! The one `unsafe` part of the transforms: a TurboJPEG handle, owned and freed here.

#![allow(unsafe_code)]

use turbojpeg::raw;

/// A JPEG's header: what decoding it would give, before anything is allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub width: usize,
    pub height: usize,
    pub colorspace: Colorspace,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colorspace {
    Gray,
    /// YCbCr or RGB: decoded to RGB.
    Color,
    /// CMYK or YCCK: decoded to CMYK.
    Cmyk,
}

/// The pixel layout to decode to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pixels {
    Gray,
    Rgb,
    Cmyk,
}

impl Pixels {
    pub fn channels(self) -> usize {
        match self {
            Pixels::Gray => 1,
            Pixels::Rgb => 3,
            Pixels::Cmyk => 4,
        }
    }

    fn format(self) -> CInt {
        match self {
            Pixels::Gray => raw::TJPF_TJPF_GRAY,
            Pixels::Rgb => raw::TJPF_TJPF_RGB,
            Pixels::Cmyk => raw::TJPF_TJPF_CMYK,
        }
    }
}

type CInt = std::os::raw::c_int;

/// TensorFlow's message for a JPEG libjpeg refuses.
pub const INVALID: &str = "jpeg::Uncompress failed. Invalid JPEG data or crop window.";

/// A TurboJPEG decompressor, freed on drop.
pub struct Decompressor {
    handle: raw::tjhandle,
}

// The handle is used by one thread at a time (`&mut self`).
unsafe impl Send for Decompressor {}

impl Drop for Decompressor {
    fn drop(&mut self) {
        // SAFETY: the handle came from tj3Init and is destroyed once.
        unsafe { raw::tj3Destroy(self.handle) }
    }
}

impl Decompressor {
    pub fn new() -> Result<Self, String> {
        // SAFETY: tj3Init returns a new handle or null.
        let handle = unsafe { raw::tj3Init(raw::TJINIT_TJINIT_DECOMPRESS as CInt) };
        if handle.is_null() {
            return Err("libjpeg-turbo: could not make a decompressor".to_owned());
        }
        let decompressor = Self { handle };
        decompressor.set(raw::TJPARAM_TJPARAM_FASTDCT, 1)?;
        decompressor.set(raw::TJPARAM_TJPARAM_FASTUPSAMPLE, 0)?;
        Ok(decompressor)
    }

    fn set(&self, param: raw::TJPARAM, value: CInt) -> Result<(), String> {
        // SAFETY: a live handle and a parameter of the API.
        match unsafe { raw::tj3Set(self.handle, param as CInt, value) } {
            0 => Ok(()),
            _ => Err("libjpeg-turbo: could not set a parameter".to_owned()),
        }
    }

    fn get(&self, param: raw::TJPARAM) -> CInt {
        // SAFETY: a live handle and a parameter of the API.
        unsafe { raw::tj3Get(self.handle, param as CInt) }
    }

    /// Reads the header of `jpeg`.
    pub fn header(&mut self, jpeg: &[u8]) -> Result<Header, String> {
        // SAFETY: the pointer and length describe `jpeg`, which outlives the call.
        let status = unsafe { raw::tj3DecompressHeader(self.handle, jpeg.as_ptr(), jpeg.len() as _) };
        if status != 0 {
            return Err(INVALID.to_owned());
        }
        let (width, height) = (self.get(raw::TJPARAM_TJPARAM_JPEGWIDTH), self.get(raw::TJPARAM_TJPARAM_JPEGHEIGHT));
        let colorspace = match self.get(raw::TJPARAM_TJPARAM_COLORSPACE) as raw::TJCS {
            raw::TJCS_TJCS_GRAY => Colorspace::Gray,
            raw::TJCS_TJCS_CMYK | raw::TJCS_TJCS_YCCK => Colorspace::Cmyk,
            _ => Colorspace::Color,
        };
        match (usize::try_from(width), usize::try_from(height)) {
            (Ok(width), Ok(height)) if width > 0 && height > 0 => Ok(Header { width, height, colorspace }),
            _ => Err(INVALID.to_owned()),
        }
    }

    /// Decodes only the window of `height` rows and `width` columns at (`top`, `left`) of
    /// `jpeg`, as TensorFlow's `decode_and_crop_jpeg` does: libjpeg-turbo skips the rows
    /// above and below (`jpeg_skip_scanlines`) and decodes the columns from the iMCU
    /// boundary at or left of `left` (`jpeg_crop_scanline`); the columns left of `left`
    /// are then dropped. The header must have been read ([`Self::header`]) and the window
    /// must lie inside the image.
    ///
    /// With `scale` 2, 4 or 8, the image is decoded at 1/`scale` of its size by the IDCT
    /// itself (libjpeg's DCT scaling, not TensorFlow's pixels), and the window is in the
    /// scaled image's coordinates.
    pub fn decode_window(
        &mut self,
        jpeg: &[u8],
        pixels: Pixels,
        (top, left, height, width): (usize, usize, usize, usize),
        scale: usize,
    ) -> Result<Vec<u8>, String> {
        // The iMCU width of each TurboJPEG subsampling (its header's `tjMCUWidth`, a
        // static table the library does not export): 4:4:4, 4:2:2, 4:2:0, gray, 4:4:0,
        // 4:1:1, 4:4:1.
        const MCU_WIDTH: [usize; 7] = [8, 16, 16, 8, 8, 32, 8];
        let subsampling = self.get(raw::TJPARAM_TJPARAM_SUBSAMP);
        let mcu = match usize::try_from(subsampling).ok().and_then(|s| MCU_WIDTH.get(s)) {
            Some(&width) => width,
            None => return Err(INVALID.to_owned()),
        };
        let factor = raw::tjscalingfactor { num: 1, denom: CInt::try_from(scale).map_err(|_| INVALID.to_owned())? };
        // SAFETY: a live handle; 1/1, 1/2, 1/4 and 1/8 are factors TurboJPEG supports.
        if !matches!(scale, 1 | 2 | 4 | 8) || unsafe { raw::tj3SetScalingFactor(self.handle, factor) } != 0 {
            return Err(INVALID.to_owned());
        }
        // The iMCU in the scaled image (TurboJPEG's TJSCALED).
        let mcu = mcu.div_ceil(scale);
        let x = left - left % mcu.max(1);
        let decoded_width = left + width - x;
        let region = raw::tjregion {
            x: CInt::try_from(x).map_err(|_| INVALID.to_owned())?,
            y: CInt::try_from(top).map_err(|_| INVALID.to_owned())?,
            w: CInt::try_from(decoded_width).map_err(|_| INVALID.to_owned())?,
            h: CInt::try_from(height).map_err(|_| INVALID.to_owned())?,
        };
        // SAFETY: a live handle; the region was checked against the header by the caller.
        if unsafe { raw::tj3SetCroppingRegion(self.handle, region) } != 0 {
            return Err(INVALID.to_owned());
        }
        let channels = pixels.channels();
        let pitch = decoded_width * channels;
        let mut out = vec![0u8; pitch * height];
        let c_pitch = CInt::try_from(pitch).map_err(|_| INVALID.to_owned())?;
        // SAFETY: `out` holds `height` rows of `pitch` bytes, what tj3Decompress8 writes for
        // this cropping region and pixel format; `jpeg` outlives the call.
        let status = unsafe {
            raw::tj3Decompress8(self.handle, jpeg.as_ptr(), jpeg.len() as _, out.as_mut_ptr(), c_pitch, pixels.format())
        };
        if status != 0 {
            return Err(INVALID.to_owned());
        }
        if x == left {
            return Ok(out);
        }
        let skip = (left - x) * channels;
        let mut window = Vec::with_capacity(width * height * channels);
        for row in out.chunks_exact(pitch) {
            window.extend_from_slice(&row[skip..skip + width * channels]);
        }
        Ok(window)
    }

    /// Decodes `jpeg`, whose header is `header` (read by [`Self::header`] on this
    /// decompressor, just before), into `pixels` rows; a warning (a truncated scan) is an
    /// error, as TensorFlow's decoder makes it.
    pub fn decode(&mut self, jpeg: &[u8], header: Header, pixels: Pixels) -> Result<Vec<u8>, String> {
        let channels = pixels.channels();
        let pitch = header.width * channels;
        let mut out = vec![0u8; pitch * header.height];
        let pitch = CInt::try_from(pitch).map_err(|_| INVALID.to_owned())?;
        // SAFETY: `out` holds height rows of `pitch` bytes, what tj3Decompress8 writes for
        // this header and pixel format; `jpeg` outlives the call.
        let status = unsafe {
            raw::tj3Decompress8(self.handle, jpeg.as_ptr(), jpeg.len() as _, out.as_mut_ptr(), pitch, pixels.format())
        };
        if status != 0 {
            return Err(INVALID.to_owned());
        }
        Ok(out)
    }
}
