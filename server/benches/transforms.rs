//! The transforms' cost per image on an ImageNet-like JPEG (400×375, quality 90, 4:2:0,
//! photo-like content): `decodeImage` alone, `randomResizedCrop` to 224×224 and
//! `randomFlipLeftRight` on a decoded image, the whole training chain per element (the
//! image decoded whole, or only the crop's box) and as a batch of 64 (cut into records,
//! transformed, stacked); a 112x112 crop of the JPEG, exact and `fast` (DCT-scaled).
//!
//! Run: `cargo bench -p readerd-server --bench transforms` (images/s on one core).
//!
//! With `READERD_BENCH_JPEGS=DIR` it runs once over the `*.jpg` files of DIR instead, on one
//! thread, for `bench/jpeg_instructions.sh` to count instructions (valgrind) and time:
//! `READERD_BENCH_ONLY` is `none` (the files read only), `libjpeg` (libjpeg-turbo decoding
//! each whole to RGB through its own API, default settings), `decodeImage` (readerd's whole
//! decode), `chain` (the transforms of the spec `READERD_BENCH_SPEC` on each image) or
//! `batch` (that chain on batches of 64, stacked, as the server runs it).

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group};
use readerd_proto::v1 as pb;
use readerd_server::decode::{Dense, Tensor};
use readerd_server::spec::transforms::transforms_of;
use readerd_server::transform::Transforms;

const WIDTH: usize = 400;
const HEIGHT: usize = 375;

/// A photo-like RGB image (smooth gradients, a few edges, mild noise) as a JPEG.
fn jpeg() -> Bytes {
    let mut state = 7u32;
    let mut pixels = Vec::with_capacity(WIDTH * HEIGHT * 3);
    for y in 0..HEIGHT {
        for x in 0..WIDTH {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
            let noise = (state >> 27) as usize;
            let edge = if (x / 50 + y / 60) % 3 == 0 { 40 } else { 0 };
            pixels.push(((x * 255 / WIDTH + edge + noise) % 256) as u8);
            pixels.push(((y * 255 / HEIGHT + noise) % 256) as u8);
            pixels.push((((x + y) * 128 / (WIDTH + HEIGHT) + 64 + edge) % 256) as u8);
        }
    }
    let image = turbojpeg::Image {
        pixels: pixels.as_slice(),
        width: WIDTH,
        pitch: WIDTH * 3,
        height: HEIGHT,
        format: turbojpeg::PixelFormat::RGB,
    };
    Bytes::from(turbojpeg::compress(image, 90, turbojpeg::Subsamp::Sub2x2).expect("compress").to_vec())
}

fn chain(json: &str) -> Transforms {
    let list: Vec<pb::Transform> = serde_json::from_str(json).expect("transforms");
    transforms_of(&list, 1).expect("valid")
}

fn features(jpeg: &Bytes) -> Vec<(String, Tensor)> {
    vec![("image/encoded".to_owned(), Tensor::Dense(Dense::strings(vec![], vec![jpeg.clone()])))]
}

fn bench(c: &mut Criterion) {
    let jpeg = jpeg();
    println!("the JPEG: {WIDTH}x{HEIGHT}, {} bytes", jpeg.len());
    let decode = chain(r#"[{"decodeImage": {"feature": "image/encoded", "channels": 3, "output": "image"}}]"#);
    let crop = chain(r#"[{"randomResizedCrop": {"feature": "image", "size": [224, 224], "area": [0.08, 1.0]}}]"#);
    let flip = chain(r#"[{"randomFlipLeftRight": {"feature": "image"}}]"#);
    let training = chain(
        r#"[{"decodeImage": {"feature": "image/encoded", "channels": 3, "output": "image"}},
            {"randomResizedCrop": {"feature": "image", "size": [224, 224], "area": [0.08, 1.0]}},
            {"randomFlipLeftRight": {"feature": "image"}},
            {"drop": {"features": ["image/encoded"]}}]"#,
    );
    let fused = chain(
        r#"[{"randomResizedCrop": {"feature": "image/encoded", "size": [224, 224], "area": [0.08, 1.0], "channels": 3, "output": "image"}},
            {"randomFlipLeftRight": {"feature": "image"}},
            {"drop": {"features": ["image/encoded"]}}]"#,
    );
    let small_fused = |fast: bool| {
        chain(&format!(
            r#"[{{"randomResizedCrop": {{"feature": "image/encoded", "size": [112, 112], "area": [0.08, 1.0], "channels": 3, "output": "image", "fast": {fast}}}}},
                {{"drop": {{"features": ["image/encoded"]}}}}]"#
        ))
    };
    let (exact_112, fast_112) = (small_fused(false), small_fused(true));
    let decoded = decode.apply(features(&jpeg), 1, "k:0").unwrap().pop().unwrap();
    let cropped = crop.apply(vec![decoded.clone()], 1, "k:0").unwrap();

    let mut group = c.benchmark_group("transforms");
    group.throughput(Throughput::Elements(1));
    let mut n = 0u64;
    group.bench_function("decodeImage", |b| b.iter(|| decode.apply(features(&jpeg), 1, "k:0").unwrap()));
    group.bench_function("randomResizedCrop 224", |b| {
        b.iter(|| {
            n += 1;
            crop.apply(vec![decoded.clone()], 1, &format!("k:{n}")).unwrap()
        })
    });
    group.bench_function("randomFlipLeftRight", |b| {
        b.iter(|| {
            n += 1;
            flip.apply(cropped.clone(), 1, &format!("k:{n}")).unwrap()
        })
    });
    group.bench_function("decode + randomResizedCrop + flip", |b| {
        b.iter(|| {
            n += 1;
            training.apply(features(&jpeg), 1, &format!("k:{n}")).unwrap()
        })
    });
    group.bench_function("randomResizedCrop of the JPEG (its box decoded) + flip", |b| {
        b.iter(|| {
            n += 1;
            fused.apply(features(&jpeg), 1, &format!("k:{n}")).unwrap()
        })
    });
    // 112x112 crops: a box of 224 or more a side (most, on this image) is decoded at half
    // its size by the IDCT with `fast`.
    group.bench_function("randomResizedCrop 112 of the JPEG", |b| {
        b.iter(|| {
            n += 1;
            exact_112.apply(features(&jpeg), 1, &format!("k:{n}")).unwrap()
        })
    });
    group.bench_function("randomResizedCrop 112 of the JPEG, fast", |b| {
        b.iter(|| {
            n += 1;
            fast_112.apply(features(&jpeg), 1, &format!("k:{n}")).unwrap()
        })
    });
    group.throughput(Throughput::Elements(64));
    let batch = vec![("image/encoded".to_owned(), Tensor::Dense(Dense::strings(vec![64], vec![jpeg.clone(); 64])))];
    let keys: Vec<String> = (0..64).map(|i| format!("k:{i}")).collect();
    let ids: Vec<(&str, u64)> = keys.iter().map(|k| (k.as_str(), 1)).collect();
    group.bench_function("a batch of 64, stacked", |b| b.iter(|| training.apply_batch(batch.clone(), &ids).unwrap()));
    group.finish();
}

/// One pass over the JPEGs of `dir` in the mode `READERD_BENCH_ONLY` names; prints the
/// images done and the wall time per image.
fn once_over(dir: &str) {
    // glibc tuned as the server tunes it (no mmap and unmap for each image's buffers).
    readerd_proto::allocator::tune(Some(1));
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .expect("READERD_BENCH_JPEGS: a directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "jpg"))
        .collect();
    paths.sort();
    let jpegs: Vec<Bytes> = paths.iter().map(|p| Bytes::from(std::fs::read(p).expect("a JPEG"))).collect();
    let mode = std::env::var("READERD_BENCH_ONLY").unwrap_or_else(|_| "chain".to_owned());
    let spec_chain = || {
        let path = std::env::var("READERD_BENCH_SPEC").expect("READERD_BENCH_SPEC: the spec whose transforms run");
        let spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).expect("the spec")).expect("JSON");
        let list: Vec<pb::Transform> = serde_json::from_value(spec["transforms"].clone()).expect("its transforms");
        transforms_of(&list, 1).expect("valid transforms")
    };
    let began = std::time::Instant::now();
    let mut made = 0usize; // bytes read, pixels or features made: kept so no work is optimised away
    match mode.as_str() {
        "none" => made = jpegs.iter().map(Bytes::len).sum(),
        "libjpeg" => {
            for jpeg in &jpegs {
                made += turbojpeg::decompress(jpeg, turbojpeg::PixelFormat::RGB).expect("libjpeg-turbo").pixels.len();
            }
        }
        "decodeImage" => {
            let decode = chain(r#"[{"decodeImage": {"feature": "image/encoded", "channels": 3, "output": "image"}}]"#);
            for (i, jpeg) in jpegs.iter().enumerate() {
                made += decode.apply(features(jpeg), 1, &format!("k:{i}")).expect("decoded").len();
            }
        }
        "chain" => {
            let chain = spec_chain();
            for (i, jpeg) in jpegs.iter().enumerate() {
                made += chain.apply(features(jpeg), 1, &format!("k:{i}")).expect("transformed").len();
            }
        }
        "batch" => {
            let chain = spec_chain();
            let keys: Vec<String> = (0..jpegs.len()).map(|i| format!("k:{i}")).collect();
            for (group, keys) in jpegs.chunks(64).zip(keys.chunks(64)) {
                let batch = vec![(
                    "image/encoded".to_owned(),
                    Tensor::Dense(Dense::strings(vec![group.len()], group.to_vec())),
                )];
                let ids: Vec<(&str, u64)> = keys.iter().map(|k| (k.as_str(), 1)).collect();
                made += chain.apply_batch(batch, &ids).expect("transformed").len();
            }
        }
        other => panic!("READERD_BENCH_ONLY: none, libjpeg, decodeImage, chain or batch, not {other}"),
    }
    let took = began.elapsed();
    println!(
        "{mode}: {} images, {:.1} us an image ({made})",
        jpegs.len(),
        took.as_secs_f64() * 1e6 / jpegs.len().max(1) as f64
    );
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}

fn main() {
    match std::env::var("READERD_BENCH_JPEGS") {
        Ok(dir) => once_over(&dir),
        Err(_) => {
            benches();
            Criterion::default().configure_from_args().final_summary();
        }
    }
}
