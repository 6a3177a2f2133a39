//! Decompression of whole files: GZIP (one gzip member) and ZLIB (RFC 1950) as
//! TensorFlow's `ZlibInputStream` reads them, with zlib's own error messages.

use std::io::Read;

use flate2::{Decompress, FlushDecompress, Status};

use crate::format::FormatError;

/// How a file is compressed, after `AUTO` was resolved from its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zlib,
}

impl Compression {
    /// `AUTO`: by extension, `.gz` GZIP, `.zlib` / `.zz` ZLIB, anything else none.
    pub fn from_file_name(name: &str) -> Self {
        if name.ends_with(".gz") {
            Compression::Gzip
        } else if name.ends_with(".zlib") || name.ends_with(".zz") {
            Compression::Zlib
        } else {
            Compression::None
        }
    }
}

/// zlib's Z_DATA_ERROR, the code TensorFlow prints for damaged streams.
const Z_DATA_ERROR: i32 = -3;
const INPUT_CHUNK: usize = 64 * 1024;

/// A decompressing reader over `R`. A stream that ends early reads as end of data and
/// says so in [`Inflate::truncated`]: the driver reports it as data loss (TensorFlow
/// returns what was decompressed and, at a record boundary, no error).
pub struct Inflate<R> {
    inner: R,
    kind: &'static str,
    state: Decompress,
    input: Box<[u8]>,
    input_start: usize,
    input_end: usize,
    input_done: bool,
    stream_done: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum InflateError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Format(#[from] FormatError),
}

impl<R: Read> Inflate<R> {
    pub fn new(inner: R, compression: Compression) -> Self {
        let (kind, state) = match compression {
            Compression::Gzip => ("GZIP", Decompress::new_gzip(15)),
            Compression::Zlib | Compression::None => ("ZLIB", Decompress::new(true)),
        };
        Self {
            inner,
            kind,
            state,
            input: vec![0; INPUT_CHUNK].into_boxed_slice(),
            input_start: 0,
            input_end: 0,
            input_done: false,
            stream_done: false,
        }
    }

    /// True once the input ended before the compressed stream did: the file was cut
    /// short. An empty file is not truncated (it reads as no data, as in TensorFlow).
    pub fn truncated(&self) -> bool {
        self.input_done && !self.stream_done && self.state.total_in() > 0
    }

    /// "GZIP" or "ZLIB", for messages.
    pub fn name(&self) -> &'static str {
        self.kind
    }

    /// True once every byte of the stream has been produced, or the input ended.
    pub fn finished(&self) -> bool {
        self.stream_done || (self.input_done && self.input_start == self.input_end)
    }

    /// Decompresses into `out`; 0 means the end of the stream (see [`Inflate::truncated`]).
    pub fn read(&mut self, out: &mut [u8]) -> Result<usize, InflateError> {
        while !self.stream_done && !out.is_empty() {
            if self.input_start == self.input_end && !self.input_done {
                self.input_end = self.inner.read(&mut self.input)?;
                self.input_start = 0;
                self.input_done = self.input_end == 0;
            }
            let (in_before, out_before) = (self.state.total_in(), self.state.total_out());
            let flush = if self.input_done { FlushDecompress::Finish } else { FlushDecompress::None };
            let status =
                self.state.decompress(&self.input[self.input_start..self.input_end], out, flush).map_err(|err| {
                    FormatError::Inflate {
                        code: Z_DATA_ERROR,
                        message: err.message().unwrap_or("invalid compressed data").to_owned(),
                    }
                })?;
            self.input_start += (self.state.total_in() - in_before) as usize;
            let produced = (self.state.total_out() - out_before) as usize;
            self.stream_done = status == Status::StreamEnd;
            if produced > 0 {
                return Ok(produced);
            }
            if self.input_done && self.input_start == self.input_end {
                break; // the compressed stream ended early
            }
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn inflate_all(bytes: &[u8], compression: Compression) -> Result<Vec<u8>, InflateError> {
        let mut inflate = Inflate::new(bytes, compression);
        let mut out = Vec::new();
        let mut chunk = [0u8; 7];
        loop {
            let n = inflate.read(&mut chunk)?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(&chunk[..n]);
        }
    }

    #[test]
    fn gzip_and_zlib_round_trip_and_truncation_reads_as_end() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&data).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(inflate_all(&gz, Compression::Gzip).unwrap(), data);
        let mut cut = Inflate::new(&gz[..gz.len() / 2], Compression::Gzip);
        let mut partial = vec![0u8; data.len()];
        let mut filled = 0;
        while let n @ 1.. = cut.read(&mut partial[filled..]).unwrap() {
            filled += n;
        }
        assert!(filled < data.len() && data.starts_with(&partial[..filled]));
        assert!(cut.truncated());
        assert!(!Inflate::new(&b""[..], Compression::Gzip).truncated());

        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
        zlib.write_all(&data).unwrap();
        assert_eq!(inflate_all(&zlib.finish().unwrap(), Compression::Zlib).unwrap(), data);
    }

    #[test]
    fn wrong_container_is_zlibs_header_error() {
        let err = inflate_all(b"definitely not gzip", Compression::Gzip).unwrap_err();
        assert_eq!(err.to_string(), "inflate() failed with error -3: incorrect header check");
    }
}
