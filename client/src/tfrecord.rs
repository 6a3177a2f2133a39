//! TFRecord files on the client side: writing them (`convert`, `gen-demo`) and reading
//! them back record by record (`inspect`). The framing is TensorFlow's: a little-endian
//! u64 length, the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the
//! data. The reader checks both CRCs and never allocates a length it has not checked
//! against what remains of the file. The masked CRC is the server's
//! (`readerd_common::tfrecord_crc`).

use std::io::{self, Read, Write};

use readerd_common::tfrecord_crc::masked_crc32c;

/// Writes records with TFRecord framing.
#[derive(Debug)]
pub struct TfRecordWriter<W: Write> {
    out: W,
    /// Bytes written so far (the next record's offset).
    pub offset: u64,
}

impl<W: Write> TfRecordWriter<W> {
    pub fn new(out: W) -> Self {
        Self { out, offset: 0 }
    }

    pub fn write_record(&mut self, record: &[u8]) -> io::Result<()> {
        let len = (record.len() as u64).to_le_bytes();
        self.out.write_all(&len)?;
        self.out.write_all(&masked_crc32c(&len).to_le_bytes())?;
        self.out.write_all(record)?;
        self.out.write_all(&masked_crc32c(record).to_le_bytes())?;
        self.offset += 16 + record.len() as u64;
        Ok(())
    }

    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Reads the records of a TFRecord stream of known total length.
#[derive(Debug)]
pub struct TfRecordReader<R: Read> {
    input: R,
    /// Offset of the next record.
    pub offset: u64,
    len: u64,
}

impl<R: Read> TfRecordReader<R> {
    /// `len`: the stream's length in bytes (the file's size).
    pub fn new(input: R, len: u64) -> Self {
        Self { input, offset: 0, len }
    }

    /// The next record and its offset; `None` at the end of the stream.
    pub fn next_record(&mut self) -> io::Result<Option<(u64, Vec<u8>)>> {
        let start = self.offset;
        if start == self.len {
            return Ok(None);
        }
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{what} at {start}"));
        let mut header = [0u8; 12];
        self.input.read_exact(&mut header).map_err(|_| bad("truncated record"))?;
        let len_bytes: [u8; 8] = header[..8].try_into().expect("8 bytes");
        if masked_crc32c(&len_bytes) != u32::from_le_bytes(header[8..].try_into().expect("4 bytes")) {
            return Err(bad("corrupted record"));
        }
        let len = u64::from_le_bytes(len_bytes);
        if len.saturating_add(16) > self.len - start {
            return Err(bad("truncated record"));
        }
        let mut data = vec![0u8; len as usize];
        let mut crc = [0u8; 4];
        self.input
            .read_exact(&mut data)
            .and_then(|_| self.input.read_exact(&mut crc))
            .map_err(|_| bad("truncated record"))?;
        if masked_crc32c(&data) != u32::from_le_bytes(crc) {
            return Err(bad("corrupted record"));
        }
        self.offset = start + 16 + len;
        Ok(Some((start, data)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(records: &[&[u8]]) -> Vec<u8> {
        let mut writer = TfRecordWriter::new(Vec::new());
        for record in records {
            writer.write_record(record).unwrap();
        }
        writer.finish().unwrap()
    }

    #[test]
    fn written_records_read_back_with_their_offsets() {
        let file = framed(&[b"a", b"", b"three"]);
        let mut reader = TfRecordReader::new(file.as_slice(), file.len() as u64);
        assert_eq!(reader.next_record().unwrap(), Some((0, b"a".to_vec())));
        assert_eq!(reader.next_record().unwrap(), Some((17, Vec::new())));
        assert_eq!(reader.next_record().unwrap(), Some((33, b"three".to_vec())));
        assert_eq!(reader.next_record().unwrap(), None);
    }

    #[test]
    fn damage_is_reported_with_the_record_offset() {
        let file = framed(&[b"first", b"second"]);
        let mut flipped = file.clone();
        flipped[21 + 12] ^= 1; // a data byte of the second record
        let mut reader = TfRecordReader::new(flipped.as_slice(), flipped.len() as u64);
        reader.next_record().unwrap();
        assert_eq!(reader.next_record().unwrap_err().to_string(), "corrupted record at 21");
        // A length claiming more than the file holds is not allocated.
        let mut huge = file[..21].to_vec();
        let len = (1u64 << 40).to_le_bytes();
        huge.extend_from_slice(&len);
        huge.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
        let mut reader = TfRecordReader::new(huge.as_slice(), huge.len() as u64);
        reader.next_record().unwrap();
        assert_eq!(reader.next_record().unwrap_err().to_string(), "truncated record at 21");
    }
}
