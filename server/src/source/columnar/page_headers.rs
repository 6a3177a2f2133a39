//! The page headers of a Parquet column chunk, checked before the Parquet reader sees
//! the chunk: each page's sizes must fit in the chunk, and no page may claim more
//! uncompressed bytes than the footer says the whole chunk holds (which the reader has
//! reserved from the memory budget). The Parquet reader allocates a page's claimed
//! uncompressed size before decompressing it; this is what keeps that claim bounded.
//!
//! A page header is a Thrift compact-protocol struct (parquet.thrift's `PageHeader`):
//! field 2 is `uncompressed_page_size`, field 3 `compressed_page_size`; the page's bytes
//! follow it. No I/O.

/// Checks every page header of `chunk` (a column chunk's bytes). `uncompressed_limit`:
/// what the footer says the chunk holds uncompressed. The error says which page and why.
pub fn check_pages(chunk: &[u8], uncompressed_limit: u64) -> Result<(), String> {
    let mut at = 0;
    let mut page = 0;
    while at < chunk.len() {
        let mut reader = Compact { bytes: chunk, at };
        let (uncompressed, compressed) =
            reader.page_sizes().map_err(|reason| format!("page {page}: bad page header ({reason})"))?;
        let (Ok(uncompressed), Ok(compressed)) = (u64::try_from(uncompressed), usize::try_from(compressed)) else {
            return Err(format!("page {page}: negative page size"));
        };
        if uncompressed > uncompressed_limit {
            return Err(format!(
                "page {page} claims {uncompressed} bytes uncompressed, more than the {uncompressed_limit} its column chunk holds"
            ));
        }
        at = reader
            .at
            .checked_add(compressed)
            .filter(|&end| end <= chunk.len())
            .ok_or_else(|| format!("page {page} claims {compressed} bytes, past the end of its column chunk"))?;
        page += 1;
    }
    Ok(())
}

/// A Thrift compact-protocol reader over bytes.
struct Compact<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// Structs nested deeper than this are refused (a page header nests two levels).
const MAX_DEPTH: u32 = 16;

impl Compact<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let byte = *self.bytes.get(self.at).ok_or("the chunk ends inside a page header")?;
        self.at += 1;
        Ok(byte)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("a varint longer than 10 bytes".to_owned())
    }

    fn zigzag(&mut self) -> Result<i64, String> {
        let value = self.varint()?;
        Ok((value >> 1) as i64 ^ -((value & 1) as i64))
    }

    fn skip(&mut self, n: u64) -> Result<(), String> {
        let n = usize::try_from(n).map_err(|_| "a length past the chunk")?;
        self.at = self.at.checked_add(n).filter(|&end| end <= self.bytes.len()).ok_or("a length past the chunk")?;
        Ok(())
    }

    /// The sizes of the page header at `at`, leaving `at` after it.
    fn page_sizes(&mut self) -> Result<(i64, i64), String> {
        let (mut uncompressed, mut compressed) = (None, None);
        self.fields(0, &mut |reader, id, kind| {
            match (id, kind) {
                (2, 5) => uncompressed = Some(reader.zigzag()?),
                (3, 5) => compressed = Some(reader.zigzag()?),
                _ => reader.value(kind, 1)?,
            }
            Ok(())
        })?;
        Ok((uncompressed.ok_or("no uncompressed_page_size")?, compressed.ok_or("no compressed_page_size")?))
    }

    /// Reads a struct's fields to its stop byte, handing each to `field` (which must read
    /// or skip its value).
    fn fields(
        &mut self,
        depth: u32,
        field: &mut dyn FnMut(&mut Self, i64, u8) -> Result<(), String>,
    ) -> Result<(), String> {
        if depth > MAX_DEPTH {
            return Err("structs nested too deep".to_owned());
        }
        let mut id = 0i64;
        loop {
            let header = self.byte()?;
            if header == 0 {
                return Ok(());
            }
            let (delta, kind) = (header >> 4, header & 0x0f);
            id = if delta == 0 { self.zigzag()? } else { id + i64::from(delta) };
            field(self, id, kind)?;
        }
    }

    /// Skips an item of a list, set or map: every item takes a byte at least (a bool one
    /// byte), so a claimed size runs out of bytes rather than loop.
    fn item(&mut self, kind: u8, depth: u32) -> Result<(), String> {
        let before = self.at;
        if matches!(kind, 1 | 2) { self.skip(1) } else { self.value(kind, depth) }?;
        if self.at == before {
            return Err("an empty collection item".to_owned());
        }
        Ok(())
    }

    /// Skips a value of compact type `kind` (in a field: booleans carry no byte).
    fn value(&mut self, kind: u8, depth: u32) -> Result<(), String> {
        match kind {
            1 | 2 => Ok(()),
            3 => self.skip(1),
            4..=6 => self.varint().map(|_| ()),
            7 => self.skip(8),
            8 => {
                let len = self.varint()?;
                self.skip(len)
            }
            9 | 10 => {
                let header = self.byte()?;
                let size = if header >> 4 == 15 { self.varint()? } else { u64::from(header >> 4) };
                (0..size).try_for_each(|_| self.item(header & 0x0f, depth + 1))
            }
            11 => {
                let size = self.varint()?;
                if size == 0 {
                    return Ok(());
                }
                let types = self.byte()?;
                (0..size).try_for_each(|_| {
                    self.item(types >> 4, depth + 1)?;
                    self.item(types & 0x0f, depth + 1)
                })
            }
            12 => self.fields(depth + 1, &mut |reader, _, kind| reader.value(kind, depth + 1)),
            other => Err(format!("unknown Thrift type {other}")),
        }
    }
}
