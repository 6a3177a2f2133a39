#!/usr/bin/env python3
"""An ImageNet-like TFRecord dataset for bench/preprocess.py, written with TensorFlow.

    /work/tfvenv/bin/python bench/jpeg_data.py OUT_DIR [--images 2000] [--files 16] [--seed 1]

Writes OUT_DIR/jpeg-XXX-of-016.tfrecord: `tf.train.Example`s with `image/encoded` (a JPEG
from `tf.io.encode_jpeg(..., quality=90, chroma_downsampling=True)`, 4:2:0, one in ten
progressive) and `image/class/label` (int64, 0..999), as TensorFlow's
`build_imagenet_data.py` lays them out; and OUT_DIR/jpeg.json, the readerd spec of the
benchmark's pipeline (randomResizedCrop of the encoded JPEG to 224x224, randomFlipLeftRight, batches
of 64). Image sides are drawn independently from 256 to 512 pixels. The content is made to
compress like photographs (30-70 KB an image at quality 90): low-frequency random fields
upsampled bilinearly, a few smooth shapes, patches of texture and mild per-pixel noise.
Deterministic for a given --seed (numpy's seeded generator; the encoder is libjpeg-turbo's).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from PIL import Image

SPEC = {
    "source": {"files": ["jpeg-*.tfrecord"], "format": "TFRECORD"},
    "decoder": {"example": {"features": {
        "image/encoded": {"fixedLen": {"dtype": "STRING", "shape": []}},
        "image/class/label": {"fixedLen": {"dtype": "INT64", "shape": []}},
    }}},
    "transforms": [
        # Of the encoded JPEG: its box sampled from the header and only the box decoded, as
        # the reference's sample_distorted_bounding_box + decode_and_crop_jpeg.
        {"randomResizedCrop": {"feature": "image/encoded", "size": [224, 224], "area": [0.08, 1.0],
                               "aspectRatio": [0.75, 1.3333333], "minObjectCovered": 0.1,
                               "maxAttempts": 10, "channels": 3, "output": "image"}},
        {"randomFlipLeftRight": {"feature": "image"}},
        {"drop": {"features": ["image/encoded"]}},
    ],
    "pipeline": {"seed": 1, "shuffleFiles": True, "cycleLength": 2, "numEpochs": -1,
                 "shuffle": {"bufferSize": 256}, "batchSize": 64},
}


def upsample(field: np.ndarray, h: int, w: int) -> np.ndarray:
    """A float32 [gh, gw, c] field resized bilinearly to [h, w, c] (Pillow, per channel)."""
    return np.stack([np.asarray(Image.fromarray(field[..., c]).resize((w, h), Image.BILINEAR))
                     for c in range(field.shape[-1])], axis=-1)


def photo(rng: np.random.Generator) -> np.ndarray:
    """A uint8 [h, w, 3] image that JPEG-compresses about as a photograph does."""
    h, w = (int(v) for v in rng.integers(256, 513, size=2))
    # Low-frequency random fields, coarse to fine, each upsampled bilinearly (about 1/f).
    base = rng.uniform(60, 190, size=3).astype(np.float32)
    image = np.broadcast_to(base, (h, w, 3)).astype(np.float32)
    for cells, amp in ((2, 45.0), (5, 28.0), (12, 16.0), (30, 9.0), (70, 6.0), (160, 4.0)):
        gh, gw = max(2, round(cells * h / 384)), max(2, round(cells * w / 384))
        luma = rng.normal(0, amp, size=(gh, gw, 1))
        chroma = rng.normal(0, amp * 0.35, size=(gh, gw, 3))
        image += upsample((luma + chroma).astype(np.float32), h, w)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    # A few smooth shapes: shaded ellipses with soft edges.
    for _ in range(int(rng.integers(2, 6))):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        ry, rx = rng.uniform(0.08, 0.35) * h, rng.uniform(0.08, 0.35) * w
        d = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2
        mask = np.clip((1.0 - d) * rng.uniform(3, 12), 0, 1)[..., None]
        colour = rng.uniform(20, 235, size=3).astype(np.float32)
        shade = 1.0 + 0.35 * ((yy - cy) / ry)[..., None] * rng.uniform(-1, 1)
        image = image * (1 - mask) + np.clip(colour * shade, 0, 255) * mask
    # Texture: oriented stripes and fine random grain in a few soft patches.
    for _ in range(int(rng.integers(1, 4))):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        r = rng.uniform(0.15, 0.45) * min(h, w)
        mask = np.clip(1.5 - np.hypot(yy - cy, xx - cx) / r, 0, 1)[..., None]
        theta, period = rng.uniform(0, np.pi), rng.uniform(3, 14)
        stripes = np.sin((xx * np.cos(theta) + yy * np.sin(theta)) * 2 * np.pi / period)
        fine = upsample(rng.normal(0, 1, size=(h // 2 + 1, w // 2 + 1, 1)).astype(np.float32), h, w)[..., 0]
        texture = rng.uniform(6, 16) * stripes + rng.uniform(6, 16) * fine
        image += texture[..., None] * mask
    # Mild per-pixel noise, mostly luminance.
    image += rng.normal(0, 4.5, size=(h, w, 1)) + rng.normal(0, 1.5, size=(h, w, 3))
    return np.clip(image + 0.5, 0, 255).astype(np.uint8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    import tensorflow as tf

    began = time.perf_counter()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    writers = [tf.io.TFRecordWriter(os.path.join(args.out, f"jpeg-{i:03d}-of-{args.files:03d}.tfrecord"))
               for i in range(args.files)]
    sizes, progressive = [], 0
    for n in range(args.images):
        pixels = photo(rng)
        label = int(rng.integers(0, 1000))
        prog = n % 10 == 9  # a tenth progressive
        progressive += prog
        jpeg = tf.io.encode_jpeg(pixels, quality=90, chroma_downsampling=True, progressive=prog).numpy()
        sizes.append(len(jpeg))
        example = tf.train.Example(features=tf.train.Features(feature={
            "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg])),
            "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
        }))
        # deterministic=True: the map of features in a fixed order (else it follows the string hash seed).
        writers[n * args.files // args.images].write(example.SerializeToString(deterministic=True))
    for writer in writers:
        writer.close()
    with open(os.path.join(args.out, "jpeg.json"), "w") as f:
        json.dump(SPEC, f, indent=1)
        f.write("\n")

    sizes_kb = np.array(sizes) / 1000
    print(f"{args.images} JPEGs ({progressive} progressive) in {args.files} files in {args.out}: "
          f"{sizes_kb.sum() / 1000:.1f} MB; size mean {sizes_kb.mean():.1f} KB, "
          f"min {sizes_kb.min():.1f}, median {np.median(sizes_kb):.1f}, max {sizes_kb.max():.1f} KB")
    print(f"spec: {os.path.join(args.out, 'jpeg.json')}")
    print(f"took {time.perf_counter() - began:.1f} s")
    if not 30 <= sizes_kb.mean() <= 70:
        raise SystemExit(f"mean JPEG size {sizes_kb.mean():.1f} KB is outside 30-70 KB")


if __name__ == "__main__":
    main()
