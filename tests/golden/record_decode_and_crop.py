#!/usr/bin/env python3
"""Records `decode_and_crop` cases: `tf.io.decode_and_crop_jpeg(contents, crop_window,
channels)` on the JPEGs of `transforms/images/` (written by record_transforms.py), a few
seeded windows each, corners and edges included. TensorFlow decodes only the window
(libjpeg-turbo's jpeg_crop_scanline and jpeg_skip_scanlines), which gives other pixels
than decoding the whole image and cropping where fancy upsampling meets the window's edges:
readerd's `randomResizedCrop` of an encoded JPEG decodes the same way, and these cases
check it is TensorFlow's.

    /tmp/tfvenv/bin/python tests/golden/record_decode_and_crop.py   # after record_transforms.py

It rewrites `decode_and_crop/` and `cases/decode_and_crop/` and puts the cases into
`cases/index.json` (replacing earlier `dac_*` entries). Deterministic.
"""

import glob
import gzip
import io
import json
import os
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from golden_index import replace_cases  # noqa: E402

SEED = 20261129
GENERATOR = {"holdout": False, "numpy_version": np.__version__, "schema_version": 1, "seed": SEED,
             "tensorflow_version": tf.__version__}


def gzip_bytes(data):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def main():
    rng = np.random.RandomState(SEED)
    shutil.rmtree(os.path.join(HERE, "decode_and_crop"), ignore_errors=True)
    shutil.rmtree(os.path.join(HERE, "cases", "decode_and_crop"), ignore_errors=True)
    os.makedirs(os.path.join(HERE, "decode_and_crop"))
    os.makedirs(os.path.join(HERE, "cases", "decode_and_crop"))
    entries = []
    for path in sorted(glob.glob(os.path.join(HERE, "transforms", "images", "*.jpg"))):
        name = os.path.splitext(os.path.basename(path))[0]
        if "cmyk" in name or "trunc" in name or "bad" in name:
            continue
        data = open(path, "rb").read()
        try:
            h, w = (int(d) for d in tf.io.extract_jpeg_shape(data).numpy()[:2])
        except tf.errors.OpError:
            continue
        windows = [[0, 0, h, w], [0, 0, max(1, h // 2), max(1, w // 2)], [h - max(1, h // 3), w - max(1, w // 3), max(1, h // 3), max(1, w // 3)]]
        for _ in range(4):
            ch, cw = int(rng.randint(1, h + 1)), int(rng.randint(1, w + 1))
            windows.append([int(rng.randint(0, h - ch + 1)), int(rng.randint(0, w - cw + 1)), ch, cw])
        for k, window in enumerate(windows):
            for channels in (0, 3) if k % 2 == 0 else (3,):
                case_id = f"dac_{name}_{k}_c{channels}"
                crop = tf.io.decode_and_crop_jpeg(data, window, channels=channels).numpy()
                rel = f"decode_and_crop/{case_id}.bin.gz"
                with open(os.path.join(HERE, rel), "wb") as fh:
                    fh.write(gzip_bytes(np.ascontiguousarray(crop).tobytes()))
                case = {
                    "schema_version": 1, "id": case_id, "category": "decode_and_crop", "op": "tf.io.decode_and_crop_jpeg",
                    "description": f"{name}: window {window} (y, x, h, w), channels {channels}",
                    "tf_call": "tf.io.decode_and_crop_jpeg(contents, crop_window, channels=channels)",
                    "inputs": {"file": f"transforms/images/{name}.jpg", "crop_window": window, "channels": channels},
                    "expected": {"status": "ok", "image": {"kind": "dense", "dtype": "uint8", "shape": list(crop.shape), "file": rel}},
                    "generator": GENERATOR,
                }
                file = f"cases/decode_and_crop/{case_id}.json"
                with open(os.path.join(HERE, file), "w") as fh:
                    fh.write(json.dumps(case, indent=1, sort_keys=True) + "\n")
                entries.append({"category": "decode_and_crop", "file": file, "id": case_id, "op": case["op"], "status": "ok"})
    replace_cases("dac_", entries)


if __name__ == "__main__":
    main()
