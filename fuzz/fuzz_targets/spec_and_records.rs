#![no_main]
//! Arbitrary bytes into readerd_server::fuzzing::decode_with_spec: they make a spec and
//! its records together, which decode, split into messages and become Arrow columns; it
//! must return, never panic.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    readerd_server::fuzzing::decode_with_spec(data);
});
