//! Compiles `proto/readerd/v1/*.proto`, `proto/tensorflow/example.proto` and
//! `proto/arrow/flight/protocol.proto` with the vendored `protoc` (no system protoc
//! needed), then generates the proto3 JSON mapping (serde) of readerd.v1 with pbjson.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "proto/readerd/v1/data_service.proto",
    "proto/readerd/v1/dataset_spec.proto",
    "proto/readerd/v1/state.proto",
    "proto/readerd/v1/tensor.proto",
    "proto/tensorflow/example.proto",
    "proto/arrow/flight/protocol.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    let descriptor_path = out.join("readerd_v1.bin");

    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    // Maps as BTreeMap: the canonical encoding of a spec (its fingerprint) must not
    // depend on hash order.
    config.btree_map(["."]);
    // Payloads as `bytes::Bytes`: decoding and re-sending a record does not copy it.
    config.bytes(["."]);
    // Services encode with `crate::codec::ReservingCodec` (large batches, see there).
    tonic_prost_build::configure()
        .file_descriptor_set_path(&descriptor_path)
        .codec_path("crate::codec::ReservingCodec")
        .compile_with_config(config, PROTOS, &["proto"])?;

    let descriptors = std::fs::read(&descriptor_path)?;
    pbjson_build::Builder::new().register_descriptors(&descriptors)?.btree_map(["."]).build(&[".readerd"])?;
    Ok(())
}
