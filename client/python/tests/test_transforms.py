"""Transforms run on the server reach a Python trainer as numpy arrays: uint8 and float32
``[B, H, W, C]`` batches viewing the received buffers (not copies), equal to what numpy
computes from the records; and ``Client.describe`` gives their static shapes before reading."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import readerd

RECORDS = 10


def write_cifar(root: Path) -> np.ndarray:
    """CIFAR-10's binary format (1 label byte, 3 planes of 32x32): the records as bytes."""
    rng = np.random.default_rng(3)
    records = rng.integers(0, 256, size=(RECORDS, 3073), dtype=np.uint8)
    (root / "cifar.bin").write_bytes(records.tobytes())
    return records


SPEC = {
    "source": {"files": ["cifar.bin"], "format": "FIXED_LENGTH", "recordBytes": 3073},
    "decoder": {"raw": {"outType": "UINT8"}},
    "transforms": [
        {"slice": {"feature": "value", "begin": [0], "size": [1], "output": "label"}},
        {"slice": {"feature": "value", "begin": [1], "size": [3072], "output": "image"}},
        {"reshape": {"feature": "image", "shape": [3, 32, 32]}},
        {"transpose": {"feature": "image", "perm": [1, 2, 0]}},
        {"convertImageDtype": {"feature": "image", "dtype": "FLOAT32", "output": "scaled"}},
        {"drop": {"features": ["value"]}},
    ],
    "pipeline": {"batchSize": 4},
}


def test_images_arrive_as_numpy_batches_viewing_the_received_buffers(server, data_root: Path) -> None:
    records = write_cifar(data_root)
    with readerd.Client(server.addr).read(SPEC) as stream:
        batches = list(stream)
    assert [len(b["label"]) for b in batches] == [4, 4, 2]
    first = batches[0]
    image, scaled = first["image"], first["scaled"]
    assert image.dtype == np.uint8 and image.shape == (4, 32, 32, 3)
    assert scaled.dtype == np.float32 and scaled.shape == (4, 32, 32, 3)
    assert not image.flags.owndata and not scaled.flags.owndata, "views of the received buffers, not copies"
    want = records[:4, 1:].reshape(4, 3, 32, 32).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(image, want)
    np.testing.assert_array_equal(first["label"], records[:4, :1])
    np.testing.assert_array_equal(scaled, want.astype(np.float32) * np.float32(1 / 255))


def test_describe_gives_the_static_shapes_of_transformed_features(server, data_root: Path) -> None:
    write_cifar(data_root)
    described = readerd.Client(server.addr).describe(SPEC)
    shapes = {f["name"]: (f["dtype"], f["shape"]) for f in described["features"]}
    assert shapes == {"label": ("UINT8", [1]), "image": ("UINT8", [32, 32, 3]), "scaled": ("FLOAT32", [32, 32, 3])}
    assert described["batchSize"] == 4
