#!/usr/bin/env python3
"""ImageNet-style training input done by readerd: JPEG decoding, a random resized crop to
224x224, a random flip and per-channel normalization run on the server, next to the data,
and the trainer receives float32 batches ready to use.

``--make-data DIR`` writes TFRecord files of ``tf.train.Example`` records (as TensorFlow's
``build_imagenet_data.py`` lays them out: ``image/encoded`` a JPEG, ``image/class/label`` an
int64, and a few more) with synthetic photo-like JPEGs (Pillow; sides of 256 to 512 pixels),
and the spec ``DIR/imagenet.json``:

    decoder: example, image/encoded (STRING []), image/class/label (INT64 [])
    transforms: randomResizedCrop of the encoded JPEG (its box decoded, 3 channels) -> "image", [224, 224] of area
      [0.08, 1], randomFlipLeftRight, normalize by ImageNet's mean and std times 255 (the crop
      is float32 in 0..255), drop image/encoded
    pipeline: shuffled files and records, batches of 64, repeated

    pip install pillow                                   # only for --make-data
    python3 examples/imagenet_transforms.py --make-data DIR
    readerd --listen 127.0.0.1:50051 --data-root DIR --allow-unauthenticated &
    python3 examples/imagenet_transforms.py --addr 127.0.0.1:50051 --spec DIR/imagenet.json --steps 50

A batch is ``{"image": float32 [64, 224, 224, 3], "image/class/label": int64 [64]}``. The
trainer only receives: it reports the shapes and dtypes and the images per second it got,
which is what readerd's decode threads (``--decode-threads``, the cores by default) and
replicas can deliver to one trainer. JPEGs decode bit for bit as TensorFlow's
``decode_image``; the random crops and flips are readerd's own draws, seeded by
(``pipeline.seed``, epoch, record key, operation).
"""

from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path

import numpy as np

try:
    import readerd
    from readerd.tfrecord import example, write_tfrecord
except ImportError as exc:  # the package has a native core: it must be built and installed
    raise SystemExit("the readerd package is needed: pip install ./client/python") from exc

# ImageNet's per-channel mean and standard deviation (of pixels in [0, 1]), times 255:
# randomResizedCrop gives float32 pixels in 0..255.
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]  # 123.675, 116.28, 103.53
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]  # 58.395, 57.12, 57.375


def pillow():
    """Pillow's Image module, needed only to write the JPEGs of --make-data."""
    try:
        from PIL import Image
    except ImportError as exc:
        raise SystemExit("--make-data writes JPEGs with Pillow: pip install pillow") from exc
    return Image


def photo(rng: np.random.RandomState, label: int) -> np.ndarray:
    """A uint8 [h, w, 3] photo-like scene: a sky gradient, a wavy horizon over a ground
    gradient, a few shaded objects whose colour depends on the label, and fine grain."""
    h, w = rng.randint(256, 513, size=2)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    yy /= h - 1
    xx /= w - 1
    sky_top, sky_low = rng.uniform([40, 80, 150], [110, 150, 230]), rng.uniform([170, 190, 210], [230, 235, 250])
    ground_top, ground_low = rng.uniform([60, 90, 30], [150, 160, 90]), rng.uniform([40, 40, 20], [110, 90, 60])
    horizon = rng.uniform(0.35, 0.65) + 0.04 * np.sin(xx * rng.uniform(2, 9) + rng.uniform(0, 6))
    t_sky = np.clip(yy / horizon, 0, 1)[..., None]
    t_ground = np.clip((yy - horizon) / (1 - horizon), 0, 1)[..., None]
    sky = sky_top * (1 - t_sky) + sky_low * t_sky
    ground = ground_top * (1 - t_ground) + ground_low * t_ground
    edge = 1 / (1 + np.exp(np.clip((horizon - yy) * 400, -50, 50)))[..., None]  # a soft horizon line
    image = sky * (1 - edge) + ground * edge
    colour = np.array([(label * 37) % 256, (label * 91) % 256, (label * 53) % 256], dtype=np.float32)
    for _ in range(rng.randint(1, 5)):
        cy, cx = rng.uniform(0.3, 0.9), rng.uniform(0.1, 0.9)
        ry, rx = rng.uniform(0.05, 0.25), rng.uniform(0.05, 0.25)
        d = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2
        inside = (1 / (1 + np.exp(np.clip((d - 1) * 12, -50, 50))))[..., None]  # an ellipse with a soft edge
        shade = np.clip(1.15 - 0.5 * (yy - cy + ry) / (2 * ry) - 0.2 * (xx - cx) / rx, 0.5, 1.3)[..., None]
        tint = np.clip(colour * rng.uniform(0.7, 1.2) + rng.uniform(-30, 30, size=3), 0, 255)
        image = image * (1 - inside) + tint * shade * inside
    image += rng.normal(0, 4, size=image.shape)  # grain
    return np.clip(image + 0.5, 0, 255).astype(np.uint8)


def spec_of(pattern: str, seed: int, batch_size: int) -> dict:
    """The example decoder and the ImageNet training transforms, as a readerd spec."""
    return {
        "source": {"files": [pattern], "format": "TFRECORD"},
        "decoder": {
            "example": {
                "features": {
                    "image/encoded": {"fixedLen": {"dtype": "STRING", "shape": []}},
                    "image/class/label": {"fixedLen": {"dtype": "INT64", "shape": []}},
                }
            }
        },
        "transforms": [
            # Of the encoded JPEG: only the sampled box is decoded (tf.io.decode_and_crop_jpeg,
            # as the ResNet reference preprocessing does), then resized to 224x224.
            {"randomResizedCrop": {"feature": "image/encoded", "size": [224, 224], "area": [0.08, 1.0],
                                   "channels": 3, "output": "image"}},
            {"randomFlipLeftRight": {"feature": "image"}},
            {"normalize": {"feature": "image", "mean": MEAN, "std": STD}},
            {"drop": {"features": ["image/encoded"]}},
        ],
        "pipeline": {
            "seed": seed,
            "shuffleFiles": True,
            "numEpochs": -1,
            "shuffle": {"bufferSize": 256},
            "batchSize": batch_size,
        },
    }


def make_data(directory: Path, files: int, images: int, seed: int, batch_size: int) -> None:
    """``images`` JPEGs in ``files`` TFRecord files of tf.train.Example, and the spec."""
    image_module = pillow()
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(seed)
    total_bytes = 0
    for f in range(files):
        records = []
        for i in range(f, images, files):
            label = int(rng.randint(1, 1001))  # 1..1000, as build_imagenet_data.py numbers the classes
            pixels = photo(rng, label)
            encoded = io.BytesIO()
            image_module.fromarray(pixels, "RGB").save(encoded, "JPEG", quality=90)
            jpeg = encoded.getvalue()
            total_bytes += len(jpeg)
            records.append(
                example(
                    {
                        "image/height": pixels.shape[0],
                        "image/width": pixels.shape[1],
                        "image/colorspace": b"RGB",
                        "image/channels": 3,
                        "image/class/label": label,
                        "image/format": b"JPEG",
                        "image/filename": f"synthetic_{i:06d}.JPEG".encode(),
                        "image/encoded": jpeg,
                    }
                )
            )
        write_tfrecord(directory / f"train-{f:05d}-of-{files:05d}", records)
    spec = spec_of("train-*-of-*", seed, batch_size)
    (directory / "imagenet.json").write_text(json.dumps(spec, indent=1) + "\n")
    print(
        json.dumps(
            {"files": files, "images": images, "jpeg_bytes": total_bytes, "spec": str(directory / "imagenet.json")}
        )
    )


def describe(batch: dict) -> dict:
    return {name: {"dtype": str(t.dtype), "shape": list(t.shape)} for name, t in sorted(batch.items())}


def receive(args: argparse.Namespace) -> dict:
    spec = json.loads(Path(args.spec).read_text())
    summary: dict = {"batches": 0, "images": 0}
    channel_means = []
    first_at = None
    images_after_first = 0
    with readerd.Client(args.addr).read(spec) as stream:
        for batch in stream:
            now = time.monotonic()
            image = batch["image"]  # float32 [64, 224, 224, 3], normalized; a read-only numpy array
            if first_at is None:
                first_at = now  # the rate counts from the first batch: connecting and filling the pipeline excluded
                summary["batch"] = describe(batch)
            else:
                images_after_first += len(image)
            # A PyTorch trainer would take torch.from_numpy(image).permute(0, 3, 1, 2) (NCHW).
            channel_means.append(image.mean(axis=(0, 1, 2)))
            summary["batches"] += 1
            summary["images"] += len(image)
            if summary["batches"] >= args.steps:
                break
    seconds = time.monotonic() - first_at if first_at is not None else 0.0
    summary.update(
        seconds_after_first_batch=round(seconds, 3),
        images_per_second=round(images_after_first / seconds, 1) if seconds > 0 else None,
        mean_per_channel=[round(float(m), 4) for m in np.mean(channel_means, axis=0)] if channel_means else None,
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--make-data", metavar="DIR", help="write DIR/train-*-of-* and DIR/imagenet.json, then exit")
    parser.add_argument("--files", type=int, default=4, help="TFRecord files of --make-data")
    parser.add_argument("--images", type=int, default=256, help="images of --make-data, in all")
    parser.add_argument("--seed", type=int, default=1, help="seed of --make-data and the spec's pipeline.seed")
    parser.add_argument("--batch-size", type=int, default=64, help="the spec's pipeline.batchSize")
    parser.add_argument("--addr", default="127.0.0.1:50051", help="readerd address (host:port), or several replicas' (a,b,c)")
    parser.add_argument("--spec", help="the dataset spec JSON (DIR/imagenet.json)")
    parser.add_argument("--steps", type=int, default=50, help="receive this many batches")
    args = parser.parse_args()
    if args.make_data:
        make_data(Path(args.make_data), args.files, args.images, args.seed, args.batch_size)
        return
    if not args.spec:
        parser.error("--spec is required to read")
    print(json.dumps(receive(args)))


if __name__ == "__main__":
    main()
