#![no_main]
//! Arbitrary bytes into readerd_server::fuzzing::transform_image: an encoded image and one
//! transform's parameters; it must return, never panic or allocate past its limits.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    readerd_server::fuzzing::transform_image(data);
});
