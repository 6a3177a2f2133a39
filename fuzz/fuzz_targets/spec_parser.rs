#![no_main]
//! Arbitrary bytes into readerd_server::fuzzing::check_spec (as JSON and as protobuf): it
//! must return, never panic or allocate what the spec claims.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    readerd_server::fuzzing::check_spec(data);
});
