#![no_main]
//! Arbitrary bytes as a whole Arrow IPC file into readerd_server::fuzzing::read_columnar (its
//! schema typing the decoder, its rows read, decoded and indexed for the global shuffle):
//! it must return, never panic or allocate what the bytes claim.

use readerd_server::source::columnar::ColumnarFormat;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    readerd_server::fuzzing::read_columnar(data, ColumnarFormat::ArrowIpc);
});
