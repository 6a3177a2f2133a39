#!/usr/bin/env python3
"""CIFAR-10's classic training input (cifar10_input.py, ``distorted_inputs``) done by readerd:
the trainer receives batches already cut, cropped, flipped, brightened, contrasted and
standardized, and only trains.

``--make-data DIR`` writes CIFAR-10-format files (records of 1 label byte + 3072 image
bytes: the 32x32 red, green and blue planes, row-major; synthetic, smooth image-like
content whose colours depend on the class) and the spec ``DIR/cifar10.json``. The spec
reads them as FIXED_LENGTH 3073-byte records with the raw decoder (uint8 ``value``) and
does on the server what the classic ``map`` function did:

    slice label, slice image, reshape [3,32,32], transpose [1,2,0], cast float32,
    random_crop [24,24,3], random_flip_left_right, random_brightness 63,
    random_contrast 0.2-1.8, per_image_standardization; drop the raw ``value``

    python3 examples/cifar10_transforms.py --make-data DIR
    readerd --listen 127.0.0.1:50051 --data-root DIR --allow-unauthenticated &
    python3 examples/cifar10_transforms.py --addr 127.0.0.1:50051 --spec DIR/cifar10.json --steps 100

A batch is ``{"image": float32 [128, 24, 24, 3], "label": uint8 [128, 1]}`` (the last batch
of an epoch is short when the epoch is not a whole number of batches). The trainer checks
that each image arrives standardized, trains a softmax regression on the pixels (numpy)
and prints a JSON summary. Random draws are seeded by (``pipeline.seed``, epoch, record key,
operation): the same record gets the same crop in an epoch on any replica and after any
resume, and a new one the next epoch.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

try:
    import readerd
except ImportError as exc:  # the package has a native core: it must be built and installed
    raise SystemExit("the readerd package is needed: pip install ./client/python") from exc

RECORD_BYTES = 1 + 32 * 32 * 3
CLASSES = 10
# A colour per class (RGB), so that a linear model has something to learn.
CLASS_COLOURS = np.array(
    [
        [200, 60, 50], [60, 170, 60], [60, 80, 200], [210, 190, 60], [170, 70, 190],
        [60, 190, 190], [230, 130, 40], [120, 120, 120], [150, 100, 60], [240, 240, 240],
    ],
    dtype=np.float32,
)


def images(labels: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
    """uint8 [n, 32, 32, 3] images: a gradient from the class's colour to a random one in a
    random direction, a soft blob, and a little shading; smooth, not noise."""
    n = len(labels)
    yy, xx = np.mgrid[0:32, 0:32].astype(np.float32) / 31.0
    angle = rng.uniform(0, 2 * np.pi, size=(n, 1, 1)).astype(np.float32)
    ramp = np.cos(angle) * xx + np.sin(angle) * yy
    ramp = (ramp - ramp.min(axis=(1, 2), keepdims=True)) / np.ptp(ramp, axis=(1, 2), keepdims=True)
    near = CLASS_COLOURS[labels] * rng.uniform(0.7, 1.1, size=(n, 1)).astype(np.float32)
    far = rng.uniform(0, 255, size=(n, 3)).astype(np.float32)
    image = near[:, None, None, :] * (1 - ramp[..., None]) + far[:, None, None, :] * ramp[..., None]
    # A soft blob somewhere, lighter or darker than what is under it.
    cy, cx = rng.uniform(0.2, 0.8, size=(2, n, 1, 1)).astype(np.float32)
    radius = rng.uniform(0.12, 0.3, size=(n, 1, 1)).astype(np.float32)
    blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * radius**2))
    image += (blob * rng.uniform(-80, 80, size=(n, 1, 1)).astype(np.float32))[..., None]
    # Light from the top.
    image *= (1.1 - 0.25 * yy)[None, :, :, None]
    return np.clip(image + 0.5, 0, 255).astype(np.uint8)


def spec_of(files: str, seed: int) -> dict:
    """The classic CIFAR-10 reader and its distortions, as a readerd spec."""
    return {
        "source": {"files": [files], "format": "FIXED_LENGTH", "recordBytes": RECORD_BYTES},
        "decoder": {"raw": {"outType": "UINT8"}},
        "transforms": [
            {"slice": {"feature": "value", "begin": [0], "size": [1], "output": "label"}},
            {"slice": {"feature": "value", "begin": [1], "size": [3072], "output": "image"}},
            {"reshape": {"feature": "image", "shape": [3, 32, 32]}},
            {"transpose": {"feature": "image", "perm": [1, 2, 0]}},
            {"cast": {"feature": "image", "dtype": "FLOAT32"}},
            {"randomCrop": {"feature": "image", "size": [24, 24, 3]}},
            {"randomFlipLeftRight": {"feature": "image"}},
            {"randomBrightness": {"feature": "image", "maxDelta": 63}},
            {"randomContrast": {"feature": "image", "lower": 0.2, "upper": 1.8}},
            {"perImageStandardization": {"feature": "image"}},
            {"drop": {"features": ["value"]}},
        ],
        "pipeline": {
            "seed": seed,
            "shuffleFiles": True,
            "numEpochs": -1,
            "shuffle": {"bufferSize": 1000},
            "batchSize": 128,
        },
    }


def make_data(directory: Path, files: int, records: int, seed: int) -> None:
    """``files`` CIFAR-10-format files of ``records`` records each, and the spec."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(seed)
    for i in range(1, files + 1):
        labels = rng.randint(0, CLASSES, size=records)
        planes = images(labels, rng).transpose(0, 3, 1, 2).reshape(records, 3072)  # R, G, B planes
        data = np.concatenate([labels.astype(np.uint8)[:, None], planes], axis=1)
        (directory / f"data_batch_{i}.bin").write_bytes(data.tobytes())
    spec = spec_of("data_batch_*.bin", seed)
    (directory / "cifar10.json").write_text(json.dumps(spec, indent=1) + "\n")
    print(json.dumps({"files": files, "records": files * records, "spec": str(directory / "cifar10.json")}))


def describe(batch: dict) -> dict:
    return {name: {"dtype": str(t.dtype), "shape": list(t.shape)} for name, t in sorted(batch.items())}


def softmax_step(
    w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray, lr: float
) -> tuple[np.ndarray, np.ndarray, float, float]:
    """One gradient step of the softmax cross-entropy; returns the new weights, loss, accuracy."""
    logits = x @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = float(-np.mean(np.log(p[rows, y] + 1e-12)))
    accuracy = float(np.mean(p.argmax(axis=1) == y))
    grad = p
    grad[rows, y] -= 1.0
    grad /= len(y)
    return w - lr * (x.T @ grad), b - lr * grad.sum(axis=0), loss, accuracy


def train(args: argparse.Namespace) -> dict:
    spec = json.loads(Path(args.spec).read_text())
    features = 24 * 24 * 3
    w, b = np.zeros((features, CLASSES)), np.zeros(CLASSES)
    summary: dict = {"steps": 0}
    losses, accuracies, means, stds, worst = [], [], [], [], 0.0
    started = time.monotonic()
    with readerd.Client(args.addr).read(spec) as stream:
        for batch in stream:
            if "batch" not in summary:
                summary["batch"] = describe(batch)  # {"image": float32 [128,24,24,3], "label": uint8 [128,1]}
            image, label = batch["image"], batch["label"]  # read-only numpy arrays
            x = image.reshape(len(image), -1).astype(np.float64)
            y = label[:, 0].astype(np.int64)
            # perImageStandardization ran on the server: every image has mean 0, std 1.
            worst = max(worst, float(np.abs(x.mean(axis=1)).max()), float(np.abs(x.std(axis=1) - 1).max()))
            means.append(float(x.mean()))
            stds.append(float(x.std()))
            w, b, loss, accuracy = softmax_step(w, b, x, y, args.lr)
            losses.append(loss)
            accuracies.append(accuracy)
            summary["steps"] += 1
            if summary["steps"] >= args.steps:
                break
    seconds = time.monotonic() - started
    last = slice(-10, None)
    summary.update(
        seconds=round(seconds, 3),
        batch_mean=round(float(np.mean(means)), 6) if means else None,
        batch_std=round(float(np.mean(stds)), 6) if stds else None,
        standardization_error=round(worst, 6),
        loss_first=round(losses[0], 4) if losses else None,
        loss_last10=round(float(np.mean(losses[last])), 4) if losses else None,
        accuracy_last10=round(float(np.mean(accuracies[last])), 4) if accuracies else None,
    )
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--make-data", metavar="DIR", help="write DIR/data_batch_*.bin and DIR/cifar10.json, then exit")
    parser.add_argument("--files", type=int, default=5, help="files of --make-data (CIFAR-10 has 5 training files)")
    parser.add_argument("--records", type=int, default=1000, help="records per file of --make-data")
    parser.add_argument("--seed", type=int, default=1, help="seed of --make-data and the spec's pipeline.seed")
    parser.add_argument("--addr", default="127.0.0.1:50051", help="readerd address (host:port), or several replicas' (a,b,c)")
    parser.add_argument("--spec", help="the dataset spec JSON (DIR/cifar10.json)")
    parser.add_argument("--steps", type=int, default=100, help="train this many steps (batches)")
    parser.add_argument("--lr", type=float, default=0.01, help="learning rate")
    args = parser.parse_args()
    if args.make_data:
        make_data(Path(args.make_data), args.files, args.records, args.seed)
        return
    if not args.spec:
        parser.error("--spec is required to train")
    print(json.dumps(train(args)))


if __name__ == "__main__":
    main()
