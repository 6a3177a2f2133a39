//! The checksum of TFRecord framing: CRC-32C, masked as TensorFlow stores it. The
//! server's framer checks it and the client's writer and `inspect` write and check it.

/// CRC-32C as TFRecord stores it: rotated and offset so that CRCs of CRCs stay useful.
/// Inlined into the framer across the crate boundary, as it was when it lived there.
#[inline]
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_tensorflow() {
        // The CRC of an empty record's length field, as TensorFlow wrote it in
        // tests/golden/tfrecord/three_empty.tfrecord (bytes 8..12).
        assert_eq!(masked_crc32c(&0u64.to_le_bytes()).to_le_bytes(), [0x29, 0x03, 0x98, 0x07]);
    }
}
