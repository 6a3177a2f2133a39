#![no_main]
//! Arbitrary bytes into readerd_server::fuzzing::decode_csv: it must return, never panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    readerd_server::fuzzing::decode_csv(data);
});
