#!/usr/bin/env python3
"""Records the golden cases of readerd's per-element transforms (`DatasetSpec.transforms`):
TensorFlow's image and array ops run on each decoded element.

  * `image_decode` (`img_*`): `tf.io.decode_image(contents, channels, expand_animations=False)` on
    JPEG, PNG, GIF and BMP files made here (Pillow, libjpeg-turbo's cjpeg, and small PNG/BMP writers
    in this file), plus broken files.
  * `transform` (`xf_*`): one transform or a short chain of them on given features.
  * `transform_pipeline` (`xfp_*`): fixed-length record files read record by record (the raw
    decoder's `value`, uint8 [record_bytes]) and mapped through a chain: CIFAR-10's eval input
    (cifar10_input.py) and an MNIST reader.

Not run in CI. To re-record (from the repository root):

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 numpy==2.4.6 pillow==13.0.0
    apt-get install -y libjpeg-turbo-progs        # cjpeg, for the JPEGs Pillow cannot make
    /tmp/tfvenv/bin/python tests/golden/record_transforms.py

It deletes and rewrites `transforms/` and `cases/{image_decode,transform,transform_pipeline}/`, and puts
the cases into `cases/index.json` (replacing earlier `img_*`, `xf_*` and `xfp_*` entries).
Deterministic: seeded numpy, sorted JSON keys, gzip with mtime 0, encoders without timestamps.
(Other Pillow or cjpeg versions may encode other bytes; the expected values always come from the
bytes written.)
"""

import base64
import gzip
import hashlib
import io
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import PIL  # noqa: E402
from PIL import Image  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_index import float_json, replace_cases  # noqa: E402

assert sys.byteorder == "little"

SEED = 20240615
HERE = os.path.dirname(os.path.abspath(__file__))
TDIR = "transforms"
GENERATOR = {
    "holdout": False,
    "numpy_version": np.__version__,
    "schema_version": 1,
    "seed": SEED,
    "tensorflow_version": tf.__version__,
}
INLINE_MAX = 4096  # tensors with more elements go to a file

rng = np.random.RandomState(SEED)

DTYPES = {
    "INT8": tf.int8, "INT16": tf.int16, "INT32": tf.int32, "INT64": tf.int64, "UINT8": tf.uint8,
    "UINT16": tf.uint16, "BOOL": tf.bool, "FLOAT16": tf.float16, "BFLOAT16": tf.bfloat16,
    "FLOAT32": tf.float32, "FLOAT64": tf.float64,
}
METHODS = {"BILINEAR": "bilinear", "NEAREST": "nearest", "BICUBIC": "bicubic", "AREA": "area"}


# ----------------------------------------------------------------------------------------------
# Files and JSON


def path(rel):
    return os.path.join(HERE, rel)


def write_bytes(rel, data):
    os.makedirs(os.path.dirname(path(rel)), exist_ok=True)
    with open(path(rel), "wb") as fh:
        fh.write(data)


def gzip_bytes(data):
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buf.getvalue()


def b64(raw):
    return base64.b64encode(raw).decode("ascii")


def dumps(obj, indent=0):
    """JSON with sorted keys, one key per line, and lists of scalars on one line."""
    pad = " " * (indent + 1)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = ["%s%s: %s" % (pad, json.dumps(k), dumps(obj[k], indent + 1)) for k in sorted(obj)]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(obj, (list, tuple)):
        if all(not isinstance(v, (dict, list, tuple)) for v in obj):
            sep = (",", ":") if len(obj) > 16 else (", ", ": ")
            return json.dumps(list(obj), separators=sep)
        items = [pad + dumps(v, indent + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    return json.dumps(obj)


def dense_json(arr, dtype, file_rel=None):
    """A numpy array (or TF tensor) as a golden dense tensor; values inline up to INLINE_MAX
    elements, otherwise gzip'd little-endian bytes at `file_rel` (relative to tests/golden)."""
    if isinstance(arr, (tf.Tensor, tf.Variable)):
        arr = arr.numpy()
    arr = np.asarray(arr)
    shape = [int(d) for d in arr.shape]
    if arr.size > INLINE_MAX:
        assert dtype != "string" and file_rel is not None
        write_bytes(file_rel, gzip_bytes(np.ascontiguousarray(arr).tobytes()))
        return {"kind": "dense", "dtype": dtype, "shape": shape, "file": file_rel}
    flat = arr.reshape(-1).tolist()
    if dtype == "string":
        values = [b64(v) for v in flat]
    elif dtype.startswith("float") or dtype == "bfloat16":
        values = [float_json(v) for v in flat]
    elif dtype == "bool":
        values = [bool(v) for v in flat]
    else:
        values = [int(v) for v in flat]
    return {"kind": "dense", "dtype": dtype, "shape": shape, "values": values}


def input_json(arr, dtype):
    """An input tensor; large ones go to transforms/inputs/, named by content (shared by cases)."""
    arr = np.asarray(arr)
    if arr.size > INLINE_MAX:
        digest = hashlib.sha1(arr.tobytes() + dtype.encode()).hexdigest()[:10]
        stem = "%s_%s_%s" % (dtype, "x".join(str(d) for d in arr.shape), digest)
        return dense_json(arr, dtype, "%s/inputs/%s.bin.gz" % (TDIR, stem))
    return dense_json(arr, dtype)


def file_string_json(rel):
    return {"kind": "dense", "dtype": "string", "shape": [], "file": rel}


def error_json(err):
    message = err.message if hasattr(err, "message") else str(err)
    core = re.sub(r"^\{\{function_node [^}]*\}\} ", "", message)
    core = re.sub(r" \[Op:[^\]]*\].*$", "", core, flags=re.S)
    out = {"class": type(err).__name__, "message": message, "message_core": core}
    if not isinstance(err, tf.errors.OpError):
        out["python_level"] = True
    return out


def write_case(case):
    case["schema_version"] = 1
    case["generator"] = GENERATOR
    rel = "cases/%s/%s.json" % (case["category"], case["id"])
    os.makedirs(os.path.dirname(path(rel)), exist_ok=True)
    with open(path(rel), "w") as fh:
        fh.write(dumps(case) + "\n")
    return {"category": case["category"], "file": rel, "id": case["id"], "op": case["op"],
            "status": case["expected"]["status"]}


# ----------------------------------------------------------------------------------------------
# Synthetic pictures: smooth gradients, soft shapes, a little noise.


def photo(h, w, channels=3):
    """float64 [h, w, channels] in [0, 1], looking like a (blurry) photograph."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    yy /= max(h - 1, 1)
    xx /= max(w - 1, 1)
    img = np.empty((h, w, channels))
    for c in range(channels):
        a0, a1, a2 = rng.uniform(0.2, 0.8), rng.uniform(-0.4, 0.4), rng.uniform(-0.4, 0.4)
        fx, fy, ph = rng.uniform(0.5, 2.5), rng.uniform(0.5, 2.5), rng.uniform(0, 2 * np.pi)
        img[..., c] = a0 + a1 * xx + a2 * yy + 0.12 * np.sin(2 * np.pi * (fx * xx + fy * yy) + ph)
    scale = max(h, w)
    for _ in range(rng.randint(2, 5)):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        colour = rng.uniform(0, 1, size=channels)
        edge = max(0.8, 0.04 * scale)
        if rng.rand() < 0.5:
            r = rng.uniform(0.1, 0.35) * scale
            d = np.sqrt((yy * max(h - 1, 1) - cy) ** 2 + (xx * max(w - 1, 1) - cx) ** 2)
            mask = np.clip((r - d) / edge + 0.5, 0, 1)
        else:
            hh, hw = rng.uniform(0.1, 0.3) * h, rng.uniform(0.1, 0.3) * w
            dy = np.abs(yy * max(h - 1, 1) - cy) - hh
            dx = np.abs(xx * max(w - 1, 1) - cx) - hw
            mask = np.clip(-np.maximum(dy, dx) / edge + 0.5, 0, 1)
        alpha = rng.uniform(0.5, 0.95)
        img = img * (1 - alpha * mask[..., None]) + colour * alpha * mask[..., None]
    img += rng.normal(0, 0.015, size=img.shape)
    return np.clip(img, 0, 1)


def photo_u8(h, w, channels=3):
    return np.round(photo(h, w, channels) * 255).astype(np.uint8)


def photo_u16(h, w, channels=3):
    return np.round(photo(h, w, channels) * 65535).astype(np.uint16)


def digit(h=28, w=28):
    """An MNIST-like uint8 [h, w]: one to three thick anti-aliased strokes on black."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    dist = np.full((h, w), 1e9)
    for _ in range(rng.randint(1, 4)):
        if rng.rand() < 0.4:  # a ring
            cy, cx = rng.uniform(9, 19), rng.uniform(9, 19)
            ry, rx = rng.uniform(3, 8), rng.uniform(3, 7)
            d = np.abs(np.sqrt(((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2) - 1) * min(ry, rx)
        else:  # a segment
            p = rng.uniform(4, 24, size=2)
            q = rng.uniform(4, 24, size=2)
            v = q - p
            t = np.clip(((yy - p[0]) * v[0] + (xx - p[1]) * v[1]) / max(v @ v, 1e-9), 0, 1)
            d = np.sqrt((yy - p[0] - t * v[0]) ** 2 + (xx - p[1] - t * v[1]) ** 2)
        dist = np.minimum(dist, d)
    width = rng.uniform(1.0, 1.8)
    ink = np.clip(width + 0.5 - dist, 0, 1)
    return np.round(ink * 255).astype(np.uint8)


# ----------------------------------------------------------------------------------------------
# Encoders


def pillow_jpeg(arr, **kw):
    img = Image.fromarray(arr[..., 0], "L") if arr.shape[2] == 1 else Image.fromarray(arr, "RGB")
    if kw.pop("cmyk", False):
        img = img.convert("CMYK")
    buf = io.BytesIO()
    img.save(buf, "JPEG", **kw)
    return buf.getvalue()


def cjpeg(arr, args):
    """libjpeg-turbo's cjpeg on a PPM/PGM of `arr` (uint8 [h, w, 1|3])."""
    h, w, c = arr.shape
    header = b"P%d\n%d %d\n255\n" % (5 if c == 1 else 6, w, h)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "in.pnm")
        with open(src, "wb") as fh:
            fh.write(header + arr.tobytes())
        return subprocess.run(["cjpeg"] + args + [src], check=True, stdout=subprocess.PIPE).stdout


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_filter(rows, bpp):
    """Filters each row (bytes) with filter type (row index mod 5): None, Sub, Up, Average, Paeth."""
    out = bytearray()
    prev = bytes(len(rows[0])) if rows else b""
    for i, row in enumerate(rows):
        ft = i % 5
        line = bytearray(len(row))
        for x in range(len(row)):
            a = row[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if ft == 0:
                pred = 0
            elif ft == 1:
                pred = a
            elif ft == 2:
                pred = b
            elif ft == 3:
                pred = (a + b) // 2
            else:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            line[x] = (row[x] - pred) & 0xFF
        out.append(ft)
        out += line
        prev = row
    return bytes(out)


def png_rows(samples, bit_depth):
    """samples: uint [h, w, channels] -> list of packed scanlines."""
    h, w, c = samples.shape
    rows = []
    for y in range(h):
        s = samples[y].reshape(-1)
        if bit_depth == 16:
            rows.append(s.astype(">u2").tobytes())
        elif bit_depth == 8:
            rows.append(s.astype(np.uint8).tobytes())
        else:
            per = 8 // bit_depth
            padded = np.zeros(-(-len(s) // per) * per, dtype=np.uint8)
            padded[: len(s)] = s
            packed = np.zeros(len(padded) // per, dtype=np.uint8)
            for k in range(per):
                packed |= (padded[k::per] << (8 - bit_depth * (k + 1))).astype(np.uint8)
            rows.append(packed.tobytes())
    return rows


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png_encode(samples, color_type, bit_depth, palette=None, trns=None, interlace=False):
    """A PNG of `samples` (uint [h, w, channels]; palette indices for color type 3)."""
    h, w, c = samples.shape
    bpp = max(1, c * bit_depth // 8)
    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            sub = samples[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                raw += png_filter(png_rows(sub, bit_depth), bpp)
    else:
        raw = png_filter(png_rows(samples, bit_depth), bpp)
    out = b"\x89PNG\r\n\x1a\n"
    out += png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, bit_depth, color_type, 0, 0, 1 if interlace else 0))
    if palette is not None:
        out += png_chunk(b"PLTE", np.asarray(palette, dtype=np.uint8).tobytes())
    if trns is not None:
        out += png_chunk(b"tRNS", trns)
    out += png_chunk(b"IDAT", zlib.compress(raw, 9))
    out += png_chunk(b"IEND", b"")
    return out


def bmp_encode(arr, top_down=False):
    """A BITMAPINFOHEADER BMP, BI_RGB: 24-bit for RGB, 32-bit (BGRA) for RGBA."""
    h, w, c = arr.shape
    bgr = arr[..., [2, 1, 0] + ([3] if c == 4 else [])]
    stride = (w * c + 3) // 4 * 4
    rows = [bgr[y].tobytes() + bytes(stride - w * c) for y in range(h)]
    if not top_down:
        rows = rows[::-1]
    pixels = b"".join(rows)
    info = struct.pack("<IiiHHIIiiII", 40, w, -h if top_down else h, 1, 8 * c, 0, len(pixels), 2835, 2835, 0, 0)
    header = struct.pack("<2sIHHI", b"BM", 14 + len(info) + len(pixels), 0, 0, 14 + len(info))
    return header + info + pixels


def palette_of(arr, colors):
    """Quantizes uint8 RGB to `colors` entries (Pillow's median cut): (indices [h, w], palette [n, 3])."""
    img = Image.fromarray(arr, "RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    idx = np.array(img, dtype=np.uint8)
    pal = np.array(img.getpalette()[: 3 * colors], dtype=np.uint8).reshape(-1, 3)
    n = int(idx.max()) + 1
    return idx, pal[: max(n, 1)]


def gif_encode(frames, **kw):
    imgs = [Image.fromarray(f, "RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT,
                                                dither=Image.Dither.NONE) for f in frames]
    buf = io.BytesIO()
    if len(imgs) > 1:
        imgs[0].save(buf, "GIF", save_all=True, append_images=imgs[1:], duration=100, loop=0, **kw)
    else:
        imgs[0].save(buf, "GIF", **kw)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------
# The transforms, as TensorFlow


def scale_op(x, a):
    fdt = x.dtype if x.dtype.is_floating else tf.float32
    if not x.dtype.is_floating:
        x = tf.cast(x, tf.float32)
    return x * tf.constant(a.get("multiply", 1.0), fdt) + tf.constant(a.get("add", 0.0), fdt)


def random_resized_crop(x, a):
    begin, size, _ = tf.image.sample_distorted_bounding_box(
        tf.shape(x), tf.zeros([0, 0, 4], tf.float32), min_object_covered=a.get("minObjectCovered", 0.1),
        aspect_ratio_range=a.get("aspectRatio", [0.75, 1.33]), area_range=a.get("area", [0.05, 1.0]),
        max_attempts=a.get("maxAttempts", 0) or 100, use_image_if_no_bounding_boxes=True)
    return tf.image.resize(tf.slice(x, begin, size), a["size"], method="bilinear")


OPS = {
    "slice": lambda x, a: tf.slice(x, a["begin"], a["size"]),
    "reshape": lambda x, a: tf.reshape(x, a["shape"]),
    "transpose": lambda x, a: tf.transpose(x, a["perm"]) if a.get("perm") else tf.transpose(x),
    "cast": lambda x, a: tf.cast(x, DTYPES[a["dtype"]]),
    "scale": scale_op,
    "decodeRaw": lambda x, a: tf.io.decode_raw(x, DTYPES[a["outType"]], little_endian=a.get("littleEndian", True)),
    "decodeImage": lambda x, a: tf.io.decode_image(x, channels=a.get("channels", 0), expand_animations=False),
    "resize": lambda x, a: tf.image.resize(x, a["size"], method=METHODS[a.get("method", "BILINEAR")],
                                           antialias=False),
    "centralCrop": lambda x, a: tf.image.central_crop(x, a["fraction"]),
    "resizeWithCropOrPad": lambda x, a: tf.image.resize_with_crop_or_pad(x, a["height"], a["width"]),
    "convertImageDtype": lambda x, a: tf.image.convert_image_dtype(x, DTYPES[a["dtype"]],
                                                                   saturate=a.get("saturate", False)),
    "normalize": lambda x, a: (tf.cast(x, tf.float32) - tf.constant(a["mean"], tf.float32))
    / tf.constant(a["std"], tf.float32),
    "perImageStandardization": lambda x, a: tf.image.per_image_standardization(x),
    "flipLeftRight": lambda x, a: tf.image.flip_left_right(x),
    "flipUpDown": lambda x, a: tf.image.flip_up_down(x),
    "adjustBrightness": lambda x, a: tf.image.adjust_brightness(x, a["delta"]),
    "adjustContrast": lambda x, a: tf.image.adjust_contrast(x, a["factor"]),
    "randomCrop": lambda x, a: tf.image.random_crop(x, a["size"], seed=1),
    "randomFlipLeftRight": lambda x, a: tf.image.random_flip_left_right(x, seed=1),
    "randomFlipUpDown": lambda x, a: tf.image.random_flip_up_down(x, seed=1),
    "randomBrightness": lambda x, a: tf.image.random_brightness(x, a["maxDelta"], seed=1),
    "randomContrast": lambda x, a: tf.image.random_contrast(x, a["lower"], a["upper"], seed=1),
    "randomResizedCrop": random_resized_crop,
}
RANDOM_OPS = {"randomCrop", "randomFlipLeftRight", "randomFlipUpDown", "randomBrightness", "randomContrast",
              "randomResizedCrop"}

TF_CALLS = {
    "slice": "{o} = tf.slice({x}, begin={begin}, size={size})",
    "reshape": "{o} = tf.reshape({x}, {shape})",
    "transpose": "{o} = tf.transpose({x}, perm={perm})",
    "cast": "{o} = tf.cast({x}, tf.{dtype_l})",
    "scale": "{o} = {xf} * {multiply!r} + {add!r}  (constants in the float dtype)",
    "decodeRaw": "{o} = tf.io.decode_raw({x}, tf.{outType_l}, little_endian={littleEndian})",
    "decodeImage": "{o} = tf.io.decode_image({x}, channels={channels}, expand_animations=False)",
    "resize": "{o} = tf.image.resize({x}, {size}, method='{method_l}', antialias=False)",
    "centralCrop": "{o} = tf.image.central_crop({x}, {fraction!r})",
    "resizeWithCropOrPad": "{o} = tf.image.resize_with_crop_or_pad({x}, {height}, {width})",
    "convertImageDtype": "{o} = tf.image.convert_image_dtype({x}, tf.{dtype_l}, saturate={saturate})",
    "normalize": "{o} = (tf.cast({x}, tf.float32) - tf.constant({mean}, tf.float32)) / tf.constant({std}, tf.float32)",
    "perImageStandardization": "{o} = tf.image.per_image_standardization({x})",
    "flipLeftRight": "{o} = tf.image.flip_left_right({x})",
    "flipUpDown": "{o} = tf.image.flip_up_down({x})",
    "adjustBrightness": "{o} = tf.image.adjust_brightness({x}, {delta!r})",
    "adjustContrast": "{o} = tf.image.adjust_contrast({x}, {factor!r})",
    "randomCrop": "{o} = tf.image.random_crop({x}, {size})",
    "randomFlipLeftRight": "{o} = tf.image.random_flip_left_right({x})",
    "randomFlipUpDown": "{o} = tf.image.random_flip_up_down({x})",
    "randomBrightness": "{o} = tf.image.random_brightness({x}, {maxDelta!r})",
    "randomContrast": "{o} = tf.image.random_contrast({x}, {lower!r}, {upper!r})",
    "randomResizedCrop": "{o} = random_resized_crop({x}, {size})  # sample_distorted_bounding_box + slice + resize",
}

LOWER = {"FLOAT32": "float32", "FLOAT64": "float64", "FLOAT16": "float16", "BFLOAT16": "bfloat16",
         "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64", "UINT8": "uint8",
         "UINT16": "uint16", "BOOL": "bool"}


def tf_call_of(transforms):
    lines = []
    for t in transforms:
        ((name, a),) = t.items()
        if name == "drop":
            lines.append("for f in %r: del features[f]" % (a["features"],))
            continue
        fmt = dict(a)
        fmt.setdefault("perm", None)
        fmt.setdefault("multiply", 1.0)
        fmt.setdefault("add", 0.0)
        fmt.setdefault("littleEndian", True)
        fmt.setdefault("channels", 0)
        fmt.setdefault("saturate", False)
        fmt.setdefault("method", "BILINEAR")
        for k in ("dtype", "outType", "method"):
            if k in fmt:
                fmt[k + "_l"] = LOWER.get(fmt[k], METHODS.get(fmt[k], fmt[k]))
        fmt["x"] = "features[%r]" % a["feature"]
        fmt["xf"] = "float(features[%r])" % a["feature"]
        fmt["o"] = "features[%r]" % (a.get("output") or a["feature"])
        lines.append(TF_CALLS[name].format(**fmt))
    return "; ".join(lines)


def apply_transforms(features, transforms):
    """Runs the chain eagerly; returns (features, None) or (None, (index, exception))."""
    features = dict(features)
    for i, t in enumerate(transforms):
        ((name, a),) = t.items()
        try:
            if name == "drop":
                for f in a["features"]:
                    del features[f]
                continue
            y = OPS[name](features[a["feature"]], a)
            if name in RANDOM_OPS:
                y = tf.identity(y)
                raise AssertionError("random op %s succeeded: it cannot have a golden output" % name)
            features[a.get("output") or a["feature"]] = y
        except (tf.errors.OpError, ValueError, TypeError) as err:
            return None, (i, err)
    return features, None


# Tolerance for float outputs by op (integer outputs are always exact).
EXACT = (0.0, 0.0)
TOL = {
    "convertImageDtype": (1e-5, 0.0), "cast": EXACT,
    "scale": (1e-5, 1e-6), "normalize": (1e-5, 1e-6), "adjustBrightness": (1e-5, 1e-6),
    "perImageStandardization": (1e-5, 1e-5), "adjustContrast": (1e-5, 1e-5),
    "resize": (1e-4, 1e-3),
}


def tolerance_of(transforms, outputs_float):
    if not outputs_float:
        return {"rtol": 0.0, "atol": 0.0}
    rtol, atol = EXACT
    for t in transforms:
        ((name, a),) = t.items()
        r, at = TOL.get(name, EXACT)
        if name == "resize" and a.get("method") == "NEAREST":
            r, at = EXACT
        rtol, atol = max(rtol, r), max(atol, at)
    return {"rtol": rtol, "atol": atol}


def tensor_out_json(case_id, name, t):
    arr = t.numpy()
    dtype = t.dtype.name
    return dense_json(arr, dtype, "%s/expected/%s.%s.bin.gz" % (TDIR, case_id, name))


def run_case(case_id, category, op, description, features, transforms, extra_inputs=None):
    """features: {name: (tf tensor, input json)}."""
    tf_in = {k: v[0] for k, v in features.items()}
    out, err = apply_transforms(tf_in, transforms)
    if err is None:
        expected = {"status": "ok", "features": {k: tensor_out_json(case_id, k, v) for k, v in sorted(out.items())}}
        floats = any(v.dtype.is_floating for v in out.values())
        tolerance = tolerance_of(transforms, floats)
    else:
        index, exc = err
        expected = {"status": "error", "error": error_json(exc), "error_at_transform": index}
        tolerance = {"rtol": 0.0, "atol": 0.0}
    inputs = {"features": {k: v[1] for k, v in features.items()}, "transforms": transforms}
    if extra_inputs:
        inputs.update(extra_inputs)
    case = {"id": case_id, "category": category, "op": op, "description": description,
            "tf_call": tf_call_of(transforms), "inputs": inputs, "expected": expected, "tolerance": tolerance}
    entry = write_case(case)
    return entry, out


# ----------------------------------------------------------------------------------------------
# image_decode


DECODE_OP = "tf.io.decode_image"


def image_file(name, data):
    rel = "%s/images/%s" % (TDIR, name)
    write_bytes(rel, data)
    return rel


def decode_case(entries, case_id, rel, channels, description, info):
    data = open(path(rel), "rb").read()
    feats = {"image": (tf.constant(data), file_string_json(rel))}
    transforms = [{"decodeImage": {"feature": "image", "channels": channels}}]
    entry, _ = run_case(case_id, "image_decode", DECODE_OP, description, feats, transforms,
                        {"image_info": info})
    entries.append(entry)


SUBSAMPLING = {0: "4:4:4", 1: "4:2:2", 2: "4:2:0"}
PILLOW_JPEG = "Pillow %s" % PIL.__version__


def record_image_decode():
    entries = []

    def jpeg(name, arr, channels_list, what, **kw):
        data = pillow_jpeg(arr, **kw)
        rel = image_file(name + ".jpg", data)
        info = {"format": "jpeg", "height": arr.shape[0], "width": arr.shape[1], "encoder": PILLOW_JPEG}
        gray = arr.ndim == 2 or arr.shape[2] == 1
        info["components"] = 4 if kw.get("cmyk") else (1 if gray else 3)
        if "quality" in kw:
            info["quality"] = kw["quality"]
        if not gray and not kw.get("cmyk"):
            info["subsampling"] = SUBSAMPLING[kw.get("subsampling", 2)]
        for k in ("progressive", "restart_marker_blocks", "restart_marker_rows", "optimize"):
            if kw.get(k):
                info[k] = kw[k]
        for c in channels_list:
            decode_case(entries, "img_%s_c%d" % (name, c), rel, c, "%s, channels=%d." % (what, c), info)

    def cjpeg_file(name, arr, args, channels_list, what):
        data = cjpeg(arr, args)
        rel = image_file(name + ".jpg", data)
        info = {"format": "jpeg", "height": arr.shape[0], "width": arr.shape[1],
                "encoder": "cjpeg (libjpeg-turbo) " + " ".join(args), "components": arr.shape[2]}
        for c in channels_list:
            decode_case(entries, "img_%s_c%d" % (name, c), rel, c, "%s, channels=%d." % (what, c), info)

    # --- JPEG: subsampling and channels
    base = photo_u8(48, 64)
    jpeg("jpeg_444_q90_48x64", base, [0, 1], "JPEG 48x64 baseline 4:4:4 q90", quality=90, subsampling=0)
    jpeg("jpeg_422_q90_48x64", base, [0], "JPEG 48x64 baseline 4:2:2 q90", quality=90, subsampling=1)
    jpeg("jpeg_420_q90_48x64", base, [0, 1, 3], "JPEG 48x64 baseline 4:2:0 q90", quality=90, subsampling=2)
    # --- sizes (h x w), 4:2:0 q75; odd sizes exercise the chroma upsampling at the edges
    for h, w in [(1, 1), (2, 3), (7, 5), (16, 16), (17, 33), (33, 17), (95, 127), (211, 300)]:
        jpeg("jpeg_420_q75_%dx%d" % (h, w), photo_u8(h, w), [0], "JPEG %dx%d baseline 4:2:0 q75" % (h, w),
             quality=75, subsampling=2)
    for h, w in [(7, 5), (17, 33)]:
        jpeg("jpeg_422_q75_%dx%d" % (h, w), photo_u8(h, w), [0], "JPEG %dx%d baseline 4:2:2 q75" % (h, w),
             quality=75, subsampling=1)
    jpeg("jpeg_444_q75_7x5", photo_u8(7, 5), [0], "JPEG 7x5 baseline 4:4:4 q75", quality=75, subsampling=0)
    # --- qualities
    q_img = photo_u8(33, 17)
    for q in [20, 50, 90, 100]:  # 75: the sizes above
        jpeg("jpeg_420_q%d_33x17b" % q, q_img, [0], "JPEG 33x17 4:2:0 quality %d (same picture for each quality)" % q,
             quality=q, subsampling=2)
    jpeg("jpeg_444_q100_17x33", photo_u8(17, 33), [0], "JPEG 17x33 4:4:4 quality 100", quality=100, subsampling=0)
    # --- progressive
    jpeg("jpeg_420_prog_q85_48x64", photo_u8(48, 64), [0, 3], "JPEG 48x64 progressive 4:2:0 q85",
         quality=85, subsampling=2, progressive=True)
    jpeg("jpeg_444_prog_q85_17x33", photo_u8(17, 33), [0], "JPEG 17x33 progressive 4:4:4 q85",
         quality=85, subsampling=0, progressive=True)
    jpeg("jpeg_420_opt_q80_33x17", photo_u8(33, 17), [0], "JPEG 33x17 4:2:0 q80 with optimized Huffman tables",
         quality=80, subsampling=2, optimize=True)
    # --- grayscale
    gray = photo_u8(48, 64, 1)
    jpeg("jpeg_gray_q90_48x64", gray, [0, 1, 3], "JPEG 48x64 grayscale (1 component) q90", quality=90)
    jpeg("jpeg_gray_q75_7x5", photo_u8(7, 5, 1), [0], "JPEG 7x5 grayscale q75", quality=75)
    jpeg("jpeg_gray_prog_q75_17x33", photo_u8(17, 33, 1), [0], "JPEG 17x33 grayscale progressive q75", quality=75,
         progressive=True)
    # --- restart intervals
    jpeg("jpeg_420_rst1blk_q75_33x17", photo_u8(33, 17), [0], "JPEG 33x17 4:2:0 q75, a restart marker after every MCU",
         quality=75, subsampling=2, restart_marker_blocks=1)
    jpeg("jpeg_444_rst3blk_q75_17x33", photo_u8(17, 33), [0], "JPEG 17x33 4:4:4 q75, a restart marker every 3 MCUs",
         quality=75, subsampling=0, restart_marker_blocks=3)
    jpeg("jpeg_420_rst1row_prog_q75_48x64", photo_u8(48, 64), [0],
         "JPEG 48x64 progressive 4:2:0 q75, a restart marker every MCU row", quality=75, subsampling=2,
         restart_marker_rows=1, progressive=True)
    cjpeg_file("cjpeg_420_rst2_q75_33x17", photo_u8(33, 17), ["-quality", "75", "-sample", "2x2", "-restart", "2"],
               [0], "JPEG 33x17 4:2:0 q75 by cjpeg -restart 2 (every 2 MCU rows)")
    cjpeg_file("cjpeg_422_rst5b_q90_17x33", photo_u8(17, 33), ["-quality", "90", "-sample", "2x1", "-restart", "5B"],
               [0], "JPEG 17x33 4:2:2 q90 by cjpeg -restart 5B (every 5 MCUs)")
    # --- cjpeg only: other samplings, arithmetic coding, progressive
    cjpeg_file("cjpeg_440_q85_33x17", photo_u8(33, 17), ["-quality", "85", "-sample", "1x2"], [0],
               "JPEG 33x17 4:4:0 (chroma halved vertically) q85 by cjpeg -sample 1x2")
    cjpeg_file("cjpeg_411_q85_17x33", photo_u8(17, 33), ["-quality", "85", "-sample", "4x1"], [0],
               "JPEG 17x33 4:1:1 q85 by cjpeg -sample 4x1")
    cjpeg_file("cjpeg_420_prog_q60_95x127", photo_u8(95, 127), ["-quality", "60", "-progressive"], [0],
               "JPEG 95x127 progressive 4:2:0 q60 by cjpeg -progressive")
    cjpeg_file("cjpeg_420_arith_q75_33x17", photo_u8(33, 17), ["-quality", "75", "-arithmetic"], [0],
               "JPEG 33x17 4:2:0 q75 with arithmetic coding (cjpeg -arithmetic)")
    cjpeg_file("cjpeg_gray_rst1_q70_33x17", photo_u8(33, 17, 1), ["-quality", "70", "-grayscale", "-restart", "1"],
               [0], "JPEG 33x17 grayscale q70 by cjpeg -restart 1")
    # --- CMYK (Adobe APP14, inverted CMYK as Pillow writes it)
    jpeg("jpeg_cmyk_q90_17x33", photo_u8(17, 33), [0, 1, 3, 4], "JPEG 17x33 CMYK (Pillow, Adobe inverted) q90",
         quality=90, cmyk=True)
    # --- EXIF orientation (TensorFlow does not rotate)
    exif = Image.Exif()
    exif[0x0112] = 6
    jpeg("jpeg_420_exif6_q85_17x33", photo_u8(17, 33), [0], "JPEG 17x33 q85 with EXIF Orientation=6 (not applied)",
         quality=85, subsampling=2, exif=exif.tobytes())

    # --- PNG
    def png(name, samples, color_type, bit_depth, channels_list, what, **kw):
        data = png_encode(samples, color_type, bit_depth, **kw)
        rel = image_file(name + ".png", data)
        info = {"format": "png", "height": samples.shape[0], "width": samples.shape[1], "color_type": color_type,
                "bit_depth": bit_depth, "interlace": "adam7" if kw.get("interlace") else "none",
                "encoder": "png_encode in record_transforms.py (filters None/Sub/Up/Average/Paeth by row)"}
        if kw.get("trns") is not None:
            info["tRNS"] = True
        for c in channels_list:
            decode_case(entries, "img_%s_c%d" % (name, c), rel, c, "%s, channels=%d." % (what, c), info)

    png("png_gray8_17x33", photo_u8(17, 33, 1), 0, 8, [0, 3, 4], "PNG 17x33 gray 8-bit")
    g16 = photo_u16(17, 33, 1)
    png("png_gray16_17x33", g16, 0, 16, [0, 3], "PNG 17x33 gray 16-bit (uint8 output)")
    g1 = photo_u8(7, 13, 1)
    png("png_gray1_7x13", (g1 > np.median(g1)).astype(np.uint8), 0, 1, [0, 4], "PNG 7x13 gray 1-bit")
    png("png_gray4_9x7", photo_u8(9, 7, 1) >> 4, 0, 4, [0, 3], "PNG 9x7 gray 4-bit")
    png("png_graya8_17x33", np.concatenate([photo_u8(17, 33, 1), photo_u8(17, 33, 1)], 2), 4, 8, [0, 1, 3, 4],
        "PNG 17x33 gray+alpha 8-bit")
    png("png_graya16_9x7", np.concatenate([photo_u16(9, 7, 1), photo_u16(9, 7, 1)], 2), 4, 16, [0, 3],
        "PNG 9x7 gray+alpha 16-bit")
    png("png_rgb8_33x17", photo_u8(33, 17), 2, 8, [0, 1, 4], "PNG 33x17 RGB 8-bit")
    png("png_rgb16_17x33", photo_u16(17, 33), 2, 16, [0, 1, 4], "PNG 17x33 RGB 16-bit")
    png("png_rgb8_1x1", photo_u8(1, 1), 2, 8, [0], "PNG 1x1 RGB 8-bit")
    rgba = np.concatenate([photo_u8(17, 33), photo_u8(17, 33, 1)], 2)
    png("png_rgba8_17x33", rgba, 6, 8, [0, 1, 3, 4], "PNG 17x33 RGBA 8-bit")
    png("png_rgba16_9x7", np.concatenate([photo_u16(9, 7), photo_u16(9, 7, 1)], 2), 6, 16, [0, 3],
        "PNG 9x7 RGBA 16-bit")
    idx, pal = palette_of(photo_u8(17, 33), 200)
    png("png_pal8_17x33", idx[..., None], 3, 8, [0, 1, 4], "PNG 17x33 palette 8-bit (%d colours), no tRNS"
        % len(pal), palette=pal)
    alpha = (np.arange(len(pal)) * 37 % 256).astype(np.uint8)[: len(pal) - 20]
    png("png_pal8_trns_17x33", idx[..., None], 3, 8, [0, 3, 4],
        "PNG 17x33 palette 8-bit with a tRNS shorter than the palette (entries past it opaque)",
        palette=pal, trns=alpha.tobytes())
    idx4, pal4 = palette_of(photo_u8(9, 7), 16)
    png("png_pal4_9x7", idx4[..., None], 3, 4, [0, 4], "PNG 9x7 palette 4-bit (%d colours), no tRNS"
        % len(pal4), palette=pal4)
    idx1, pal1 = palette_of(photo_u8(7, 13), 2)
    png("png_pal1_trns_7x13", idx1[..., None], 3, 1, [0, 4], "PNG 7x13 palette 1-bit, tRNS entry 0 transparent",
        palette=pal1, trns=b"\x00")
    gt = photo_u8(9, 7, 1)
    png("png_gray8_trns_9x7", gt, 0, 8, [0, 4], "PNG 9x7 gray 8-bit with tRNS (gray %d transparent)" % gt[4, 3, 0],
        trns=struct.pack(">H", int(gt[4, 3, 0])))
    rt = photo_u8(9, 7)
    png("png_rgb8_trns_9x7", rt, 2, 8, [0, 4], "PNG 9x7 RGB 8-bit with tRNS (the colour of pixel (2, 5) transparent)",
        trns=struct.pack(">HHH", *[int(v) for v in rt[2, 5]]))
    png("png_rgb8_adam7_17x33", photo_u8(17, 33), 2, 8, [0, 1], "PNG 17x33 RGB 8-bit interlaced (Adam7)",
        interlace=True)
    png("png_gray16_adam7_9x7", photo_u16(9, 7, 1), 0, 16, [0], "PNG 9x7 gray 16-bit interlaced (Adam7)",
        interlace=True)
    png("png_pal8_adam7_17x33", idx[..., None], 3, 8, [0, 4], "PNG 17x33 palette 8-bit interlaced (Adam7)",
        palette=pal, interlace=True)
    png("png_rgba8_adam7_3x2", photo_u8(3, 2, 4), 6, 8, [0], "PNG 3x2 RGBA 8-bit interlaced (Adam7; empty passes)",
        interlace=True)
    png("png_rgb8_adam7_1x1", photo_u8(1, 1), 2, 8, [0], "PNG 1x1 RGB 8-bit interlaced (Adam7)", interlace=True)

    # --- GIF
    frames = [photo_u8(48, 64) for _ in range(3)]
    rel = image_file("gif_anim3_48x64.gif", gif_encode(frames))
    info = {"format": "gif", "height": 48, "width": 64, "frames": 3, "encoder": "Pillow %s" % PIL.__version__}
    for c in [0, 3, 4]:
        decode_case(entries, "img_gif_anim3_48x64_c%d" % c, rel, c,
                    "Animated GIF 48x64, 3 frames: the first frame, channels=%d." % c, info)
    rel = image_file("gif_still_17x33.gif", gif_encode([photo_u8(17, 33)]))
    info = {"format": "gif", "height": 17, "width": 33, "frames": 1, "encoder": "Pillow %s" % PIL.__version__}
    for c in [0, 4]:
        decode_case(entries, "img_gif_still_17x33_c%d" % c, rel, c, "Still GIF 17x33, channels=%d." % c, info)
    rel = image_file("gif_trns_9x7.gif", gif_encode([photo_u8(9, 7)], transparency=0))
    info = {"format": "gif", "height": 9, "width": 7, "frames": 1, "transparency_index": 0,
            "encoder": "Pillow %s" % PIL.__version__}
    decode_case(entries, "img_gif_trns_9x7_c0", rel, 0, "Still GIF 9x7 with palette index 0 transparent, channels=0.",
                info)

    # --- BMP
    def bmp(name, arr, channels_list, what, top_down=False):
        rel = image_file(name + ".bmp", bmp_encode(arr, top_down))
        info = {"format": "bmp", "height": arr.shape[0], "width": arr.shape[1], "bits": 8 * arr.shape[2],
                "rows": "top-down" if top_down else "bottom-up", "encoder": "bmp_encode in record_transforms.py"}
        for c in channels_list:
            decode_case(entries, "img_%s_c%d" % (name, c), rel, c, "%s, channels=%d." % (what, c), info)

    bmp("bmp24_7x5", photo_u8(7, 5), [0, 1, 3, 4], "BMP 7x5 24-bit (rows padded to 4 bytes)")
    bmp("bmp24_48x64", photo_u8(48, 64), [0], "BMP 48x64 24-bit")
    bmp("bmp32_9x7", photo_u8(9, 7, 4), [0, 3, 4], "BMP 9x7 32-bit BGRA")
    bmp("bmp24_topdown_9x7", photo_u8(9, 7), [0], "BMP 9x7 24-bit top-down (negative height)", top_down=True)
    buf = io.BytesIO()
    Image.fromarray(photo_u8(9, 7)).quantize(colors=16, dither=Image.Dither.NONE).save(buf, "BMP")
    rel = image_file("bmp8_pal_9x7.bmp", buf.getvalue())
    decode_case(entries, "img_bmp8_pal_9x7_c0", rel, 0, "BMP 9x7 8-bit palette (Pillow), channels=0.",
                {"format": "bmp", "height": 9, "width": 7, "bits": 8, "encoder": "Pillow %s" % PIL.__version__})

    # --- errors and damaged files
    good = open(path("%s/images/jpeg_420_q90_48x64.jpg" % TDIR), "rb").read()
    rel = image_file("bad_jpeg_half.jpg", good[: len(good) // 2])
    decode_case(entries, "img_bad_jpeg_half_c0", rel, 0, "The first half of a JPEG, channels=0.",
                {"format": "jpeg", "damage": "truncated to %d of %d bytes" % (len(good) // 2, len(good))})
    rel = image_file("bad_jpeg_no_eoi.jpg", good[:-2])
    decode_case(entries, "img_bad_jpeg_no_eoi_c0", rel, 0, "A JPEG without its final EOI marker, channels=0.",
                {"format": "jpeg", "damage": "last 2 bytes (FFD9) removed"})
    rel = image_file("bad_jpeg_soi_only.jpg", good[:2])
    decode_case(entries, "img_bad_jpeg_soi_only_c0", rel, 0, "Only the SOI marker FFD8, channels=0.",
                {"format": "jpeg", "damage": "2 bytes"})
    decode_case(entries, "img_jpeg_420_q90_48x64_c2", "%s/images/jpeg_420_q90_48x64.jpg" % TDIR, 2,
                "JPEG, channels=2 (not allowed).", {"format": "jpeg"})
    decode_case(entries, "img_png_rgb8_33x17_c2", "%s/images/png_rgb8_33x17.png" % TDIR, 2,
                "PNG, channels=2 (not allowed).", {"format": "png"})
    rel = image_file("bad_not_image.bin", b"this is not an image, only some text\n" + bytes(range(40)))
    decode_case(entries, "img_bad_not_image_c0", rel, 0, "Bytes of no image format, channels=0.", {"format": None})
    rel = image_file("bad_empty.bin", b"")
    decode_case(entries, "img_bad_empty_c0", rel, 0, "The empty string, channels=0.", {"format": None})
    pngd = bytearray(open(path("%s/images/png_rgb8_33x17.png" % TDIR), "rb").read())
    idat = pngd.index(b"IDAT")
    length = struct.unpack(">I", pngd[idat - 4: idat])[0]
    crc_at = idat + 4 + length
    pngd[crc_at] ^= 0x5A
    rel = image_file("bad_png_idat_crc.png", bytes(pngd))
    decode_case(entries, "img_bad_png_idat_crc_c0", rel, 0, "PNG whose IDAT CRC is wrong, channels=0.",
                {"format": "png", "damage": "IDAT CRC byte at offset %d xor 0x5A" % crc_at})
    pngd = bytearray(open(path("%s/images/png_rgb8_33x17.png" % TDIR), "rb").read())
    pngd[29] ^= 0x01  # last byte of the IHDR CRC
    rel = image_file("bad_png_ihdr_crc.png", bytes(pngd))
    decode_case(entries, "img_bad_png_ihdr_crc_c0", rel, 0, "PNG whose IHDR CRC is wrong, channels=0.",
                {"format": "png", "damage": "IHDR CRC byte at offset 29 xor 0x01"})
    pngd = open(path("%s/images/png_rgb8_33x17.png" % TDIR), "rb").read()
    rel = image_file("bad_png_truncated.png", pngd[: idat + 4 + length // 2])
    decode_case(entries, "img_bad_png_truncated_c0", rel, 0, "PNG cut in the middle of its IDAT, channels=0.",
                {"format": "png", "damage": "truncated to %d bytes" % (idat + 4 + length // 2)})
    gifd = open(path("%s/images/gif_still_17x33.gif" % TDIR), "rb").read()
    rel = image_file("bad_gif_truncated.gif", gifd[: len(gifd) // 2])
    decode_case(entries, "img_bad_gif_truncated_c0", rel, 0, "GIF cut in half, channels=0.",
                {"format": "gif", "damage": "truncated to %d of %d bytes" % (len(gifd) // 2, len(gifd))})
    bmpd = open(path("%s/images/bmp24_48x64.bmp" % TDIR), "rb").read()
    rel = image_file("bad_bmp_truncated.bmp", bmpd[: len(bmpd) // 2])
    decode_case(entries, "img_bad_bmp_truncated_c0", rel, 0, "BMP cut in half, channels=0.",
                {"format": "bmp", "damage": "truncated to %d of %d bytes" % (len(bmpd) // 2, len(bmpd))})
    return entries


# ----------------------------------------------------------------------------------------------
# transform


NP_DTYPES = {"uint8": np.uint8, "int8": np.int8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32,
             "int64": np.int64, "float16": np.float16, "float32": np.float32, "float64": np.float64, "bool": np.bool_}


def feat(values, dtype):
    """An input feature from numpy-compatible values: (tf tensor, input JSON)."""
    arr = np.asarray(values, dtype=NP_DTYPES[dtype])
    return tf.constant(arr), input_json(arr, dtype)


def sfeat(values):
    """A string feature: one bytes (scalar) or a list of bytes ([n])."""
    arr = np.array(values, dtype=object)
    return tf.constant(values), dense_json(arr, "string")


def f32(h, w, c=3):
    return photo(h, w, c).astype(np.float32)


MAIN_OP = {
    "slice": "tf.slice", "reshape": "tf.reshape", "transpose": "tf.transpose", "cast": "tf.cast",
    "scale": "tf.math.multiply, tf.math.add", "drop": "drop (no TF op)", "decodeRaw": "tf.io.decode_raw",
    "decodeImage": "tf.io.decode_image",
    "resize": "tf.image.resize", "centralCrop": "tf.image.central_crop",
    "resizeWithCropOrPad": "tf.image.resize_with_crop_or_pad", "convertImageDtype": "tf.image.convert_image_dtype",
    "normalize": "tf.math.subtract, tf.math.divide", "perImageStandardization": "tf.image.per_image_standardization",
    "flipLeftRight": "tf.image.flip_left_right", "flipUpDown": "tf.image.flip_up_down",
    "adjustBrightness": "tf.image.adjust_brightness", "adjustContrast": "tf.image.adjust_contrast",
    "randomCrop": "tf.image.random_crop", "randomFlipLeftRight": "tf.image.random_flip_left_right",
    "randomFlipUpDown": "tf.image.random_flip_up_down", "randomBrightness": "tf.image.random_brightness",
    "randomContrast": "tf.image.random_contrast", "randomResizedCrop": "tf.image.sample_distorted_bounding_box",
}


def u8_margin(pre):
    """Smallest distance of float64 pre-truncation values to an integer (0 and 255 clip away)."""
    pre = np.asarray(pre, np.float64)
    inside = (pre > 0.001) & (pre < 254.999)
    if not inside.any():
        return 1.0
    frac = pre[inside] - np.floor(pre[inside])
    return float(np.minimum(frac, 1 - frac).min())


def record_transform():
    entries = []

    def xf(case_id, description, features, transforms, op=None):
        if op is None:
            names = [next(iter(t)) for t in transforms]
            op = MAIN_OP[names[0]] if len(set(names)) == 1 else "chain"
        entry, out = run_case("xf_" + case_id, "transform", op, description, features, transforms)
        entries.append(entry)
        return out

    label = lambda: feat(7, "int64")  # noqa: E731  an untouched feature

    # --- slice
    a = photo_u8(12, 16)
    xf("slice_u8_hwc", "uint8 [12,16,3]: begin [2,3,0] size [5,-1,2]; `label` passes through.",
       {"image": feat(a, "uint8"), "label": label()},
       [{"slice": {"feature": "image", "begin": [2, 3, 0], "size": [5, -1, 2]}}])
    xf("slice_i32_output", "int32 [10] -> `part` = elements 3..6; `x` kept.",
       {"x": feat(rng.randint(-1000, 1000, 10), "int32")},
       [{"slice": {"feature": "x", "begin": [3], "size": [4], "output": "part"}}])
    xf("slice_f32_all", "float32 [4,5] begin [0,0] size [-1,-1] (everything).",
       {"x": feat(rng.standard_normal((4, 5)), "float32")},
       [{"slice": {"feature": "x", "begin": [0, 0], "size": [-1, -1]}}])
    xf("slice_f64_empty", "float64 [4,5] begin [1,2] size [0,3] -> shape [0,3].",
       {"x": feat(rng.standard_normal((4, 5)), "float64")},
       [{"slice": {"feature": "x", "begin": [1, 2], "size": [0, 3]}}])
    xf("slice_string", "string [5] begin [1] size [3].",
       {"s": sfeat([b"a", b"bb", b"", b"dddd", b"\x00\xff"])},
       [{"slice": {"feature": "s", "begin": [1], "size": [3]}}])
    xf("slice_err_past_end", "begin [10,0,0] size [5,-1,-1] on [12,16,3]: past the end -> error.",
       {"image": feat(a, "uint8")}, [{"slice": {"feature": "image", "begin": [10, 0, 0], "size": [5, -1, -1]}}])
    xf("slice_err_begin_past_end", "begin [0,17,0] size [-1,-1,-1] on [12,16,3] -> error.",
       {"image": feat(a, "uint8")}, [{"slice": {"feature": "image", "begin": [0, 17, 0], "size": [-1, -1, -1]}}])
    xf("slice_err_negative_begin", "begin [-1,0,0] -> error.",
       {"image": feat(a, "uint8")}, [{"slice": {"feature": "image", "begin": [-1, 0, 0], "size": [2, 2, 2]}}])
    xf("slice_err_rank", "begin/size of length 2 for a rank-3 tensor -> error.",
       {"image": feat(a, "uint8")}, [{"slice": {"feature": "image", "begin": [0, 0], "size": [2, 2]}}])
    xf("slice_err_size_below_minus1", "size -2 -> error.",
       {"x": feat(rng.randint(0, 9, 6), "int32")}, [{"slice": {"feature": "x", "begin": [1], "size": [-2]}}])

    # --- reshape
    x = rng.standard_normal((6, 4))
    xf("reshape_f32", "float32 [6,4] -> [2,3,4].", {"x": feat(x, "float32")},
       [{"reshape": {"feature": "x", "shape": [2, 3, 4]}}])
    xf("reshape_infer", "uint8 [24] -> [-1,4,3] = [2,4,3].", {"x": feat(np.arange(24), "uint8")},
       [{"reshape": {"feature": "x", "shape": [-1, 4, 3]}}])
    xf("reshape_to_scalar", "int64 [1] -> [] (a scalar), into `y`.", {"x": feat([123456789012], "int64")},
       [{"reshape": {"feature": "x", "shape": [], "output": "y"}}])
    xf("reshape_empty", "float32 [0,3] -> [3,0].", {"x": feat(np.zeros((0, 3)), "float32")},
       [{"reshape": {"feature": "x", "shape": [3, 0]}}])
    xf("reshape_err_size", "float32 [6,4] (24 values) -> [5,5]: error.", {"x": feat(x, "float32")},
       [{"reshape": {"feature": "x", "shape": [5, 5]}}])
    xf("reshape_err_two_unknown", "[6,4] -> [-1,-1]: error.", {"x": feat(x, "float32")},
       [{"reshape": {"feature": "x", "shape": [-1, -1]}}])
    xf("reshape_err_not_divisible", "uint8 [24] -> [-1,5]: error.", {"x": feat(np.arange(24), "uint8")},
       [{"reshape": {"feature": "x", "shape": [-1, 5]}}])

    # --- transpose
    xf("transpose_hwc_to_chw", "uint8 [4,5,3] perm [2,0,1].", {"image": feat(photo_u8(4, 5), "uint8")},
       [{"transpose": {"feature": "image", "perm": [2, 0, 1]}}])
    xf("transpose_chw_to_hwc", "float32 [3,4,5] perm [1,2,0].", {"x": feat(rng.standard_normal((3, 4, 5)), "float32")},
       [{"transpose": {"feature": "x", "perm": [1, 2, 0]}}])
    xf("transpose_default", "int32 [2,3,4] with no perm: the dimensions reversed.",
       {"x": feat(rng.randint(-50, 50, (2, 3, 4)), "int32")}, [{"transpose": {"feature": "x"}}])
    xf("transpose_2d_f64_output", "float64 [3,5] perm [1,0] into `t`.", {"x": feat(rng.standard_normal((3, 5)), "float64")},
       [{"transpose": {"feature": "x", "perm": [1, 0], "output": "t"}}])
    xf("transpose_err_duplicate", "perm [0,0,1]: error.", {"x": feat(np.zeros((2, 3, 4)), "float32")},
       [{"transpose": {"feature": "x", "perm": [0, 0, 1]}}])
    xf("transpose_err_length", "perm [1,0] for rank 3: error.", {"x": feat(np.zeros((2, 3, 4)), "float32")},
       [{"transpose": {"feature": "x", "perm": [1, 0]}}])
    xf("transpose_err_range", "perm [0,1,3] for rank 3: error.", {"x": feat(np.zeros((2, 3, 4)), "float32")},
       [{"transpose": {"feature": "x", "perm": [0, 1, 3]}}])

    # --- cast
    fl = np.array([-3.7, -2.5, -1.5, -0.5, -0.0, 0.0, 0.49, 0.5, 1.5, 2.5, 2.51, 99.99, 127.9, 200.2, 254.99, -100.9])
    xf("cast_u8_to_f32", "uint8 [5,6,3] -> float32.", {"image": feat(photo_u8(5, 6), "uint8")},
       [{"cast": {"feature": "image", "dtype": "FLOAT32"}}])
    xf("cast_f32_to_i32", "float32 -> int32: truncation toward zero.", {"x": feat(fl, "float32")},
       [{"cast": {"feature": "x", "dtype": "INT32"}}])
    xf("cast_f32_to_u8", "float32 in [0,255] -> uint8 (truncation).", {"x": feat(np.abs(fl[4:15]), "float32")},
       [{"cast": {"feature": "x", "dtype": "UINT8"}}])
    xf("cast_i32_to_u8_wrap", "int32 -> uint8 keeps the low 8 bits (300 -> 44, -1 -> 255).",
       {"x": feat([0, 1, 255, 256, 300, -1, -128, 1000, 65535, -2147483648, 2147483647], "int32")},
       [{"cast": {"feature": "x", "dtype": "UINT8"}}])
    xf("cast_i64_to_i32_wrap", "int64 -> int32 keeps the low 32 bits.",
       {"x": feat([0, -1, 2 ** 31, 2 ** 32 + 5, -(2 ** 40) - 3, 9223372036854775807], "int64")},
       [{"cast": {"feature": "x", "dtype": "INT32"}}])
    xf("cast_u8_to_i8_wrap", "uint8 -> int8 (200 -> -56).", {"x": feat([0, 1, 127, 128, 200, 255], "uint8")},
       [{"cast": {"feature": "x", "dtype": "INT8"}}])
    xf("cast_i32_to_f16", "int32 -> float16: rounding to nearest even, 70000 -> inf.",
       {"x": feat([0, 1, 2047, 2049, 2051, 4097, 65504, 65519, 65520, 70000, -70000, -3], "int32")},
       [{"cast": {"feature": "x", "dtype": "FLOAT16"}}])
    xf("cast_f32_to_bf16", "float32 -> bfloat16 (round to nearest even; nan, inf kept).",
       {"x": feat([1.0, 1.00390625, 1.005859375, 1.01171875, 3.14159265, -2.718281828, 1e-40, 3.0e38, float("inf"),
                   float("-inf"), float("nan"), -0.0, 65504.0, 0.1], "float32")},
       [{"cast": {"feature": "x", "dtype": "BFLOAT16"}}])
    xf("cast_f64_to_f32", "float64 -> float32 (rounding, overflow to inf, underflow to a subnormal or 0).",
       {"x": feat([0.1, 1 / 3, 1e-40, 1e-46, 1e39, -1e39, 16777217.0, 2.0 ** -149, -0.0, float("nan")], "float64")},
       [{"cast": {"feature": "x", "dtype": "FLOAT32"}}])
    xf("cast_f32_to_f16", "float32 -> float16 (65520 -> inf, subnormals).",
       {"x": feat([0.1, 65504.0, 65519.0, 65520.0, 1e-5, 6e-8, 2e-8, -1.5, 1000.7, float("-inf")], "float32")},
       [{"cast": {"feature": "x", "dtype": "FLOAT16"}}])
    xf("cast_i32_to_bool", "int32 -> bool (non-zero is true).", {"x": feat([0, 1, -1, 2, 0, 255, -2147483648], "int32")},
       [{"cast": {"feature": "x", "dtype": "BOOL"}}])
    xf("cast_f32_to_bool", "float32 -> bool (-0.0 is false, nan is true).",
       {"x": feat([0.0, -0.0, 1e-45, -2.5, float("nan"), float("inf")], "float32")},
       [{"cast": {"feature": "x", "dtype": "BOOL"}}])
    xf("cast_u16_to_f32_output", "uint16 -> float32 into `f`; `x` kept.", {"x": feat([0, 1, 32768, 65535], "uint16")},
       [{"cast": {"feature": "x", "dtype": "FLOAT32", "output": "f"}}])

    # --- scale
    xf("scale_u8", "uint8 [8,8,3] * (1/255) - 0.5, in float32.", {"image": feat(photo_u8(8, 8), "uint8"), "label": label()},
       [{"scale": {"feature": "image", "multiply": 1 / 255, "add": -0.5}}])
    xf("scale_f32", "float32 * 2 + 1.", {"x": feat(rng.standard_normal((4, 5)), "float32")},
       [{"scale": {"feature": "x", "multiply": 2.0, "add": 1.0}}])
    xf("scale_f64", "float64 * 0.1 + 0.3 (stays float64).", {"x": feat(rng.standard_normal((3, 4)), "float64")},
       [{"scale": {"feature": "x", "multiply": 0.1, "add": 0.3}}])
    xf("scale_i32_add_only", "int32 + 0.5 (no multiply: 1) -> float32.", {"x": feat(rng.randint(-5000, 5000, 12), "int32")},
       [{"scale": {"feature": "x", "add": 0.5}}])
    xf("scale_f16", "float16 * 0.5 + 0.25 (stays float16).", {"x": feat(rng.standard_normal(10) * 100, "float16")},
       [{"scale": {"feature": "x", "multiply": 0.5, "add": 0.25}}])
    xf("scale_f32_large", "float32 [40,40,3] (a file) * 255 + 0.", {"x": feat(f32(40, 40), "float32")},
       [{"scale": {"feature": "x", "multiply": 255.0}}])

    # --- drop
    xf("drop_one", "Drops `b` of three features.",
       {"a": feat([1, 2], "int64"), "b": sfeat(b"payload"), "c": feat([0.5], "float32")}, [{"drop": {"features": ["b"]}}])
    xf("drop_after_slice", "slice `x` into `head`, then drop `x`.", {"x": feat(np.arange(10), "int32"), "label": label()},
       [{"slice": {"feature": "x", "begin": [0], "size": [3], "output": "head"}}, {"drop": {"features": ["x"]}}])

    # --- decode_raw
    raw12 = bytes(rng.randint(0, 256, 12).astype(np.uint8))
    xf("decode_raw_u8", "12 bytes -> uint8 [12].", {"value": sfeat(raw12)},
       [{"decodeRaw": {"feature": "value", "outType": "UINT8"}}])
    xf("decode_raw_i16_be", "12 bytes -> int16 [6], big endian.", {"value": sfeat(raw12)},
       [{"decodeRaw": {"feature": "value", "outType": "INT16", "littleEndian": False}}])
    fbytes = np.array([1.5, float("nan"), float("-inf"), -0.0, 3.4e38, 1e-45], dtype="<f4").tobytes()
    xf("decode_raw_f32_le", "float32 [6] incl. nan, -inf, -0.0, a subnormal.", {"value": sfeat(fbytes)},
       [{"decodeRaw": {"feature": "value", "outType": "FLOAT32"}}])
    xf("decode_raw_vector", "string [3] of 4 bytes each -> uint8 [3,4].",
       {"value": sfeat([b"abcd", b"\x00\x01\x02\x03", b"\xff\xfe\xfd\xfc"])},
       [{"decodeRaw": {"feature": "value", "outType": "UINT8"}}])
    xf("decode_raw_err_length", "10 bytes as int32: not a multiple of 4 -> error.", {"value": sfeat(raw12[:10])},
       [{"decodeRaw": {"feature": "value", "outType": "INT32"}}])
    xf("decode_raw_err_ragged", "string [2] of 4 and 6 bytes -> error.", {"value": sfeat([b"abcd", b"abcdef"])},
       [{"decodeRaw": {"feature": "value", "outType": "UINT8"}}])

    # --- resize
    A = photo_u8(12, 16)
    B = photo_u8(9, 7, 1)
    C = f32(10, 14)
    for m in ["BILINEAR", "NEAREST", "BICUBIC", "AREA"]:
        ml = m.lower()
        xf("resize_%s_u8_up" % ml, "uint8 [12,16,3] -> [20,30], %s." % m, {"image": feat(A, "uint8")},
           [{"resize": {"feature": "image", "size": [20, 30], "method": m}}])
        xf("resize_%s_u8_down" % ml, "uint8 [12,16,3] -> [5,7], %s." % m, {"image": feat(A, "uint8")},
           [{"resize": {"feature": "image", "size": [5, 7], "method": m}}])
        xf("resize_%s_gray_odd" % ml, "uint8 [9,7,1] -> [17,13], %s." % m, {"image": feat(B, "uint8")},
           [{"resize": {"feature": "image", "size": [17, 13], "method": m}}])
        xf("resize_%s_f32_down" % ml, "float32 [10,14,3] -> [7,9], %s." % m, {"image": feat(C, "float32")},
           [{"resize": {"feature": "image", "size": [7, 9], "method": m}}])
        xf("resize_%s_f32_mixed" % ml, "float32 [10,14,3] -> [15,6] (up in height, down in width), %s." % m,
           {"image": feat(C, "float32")}, [{"resize": {"feature": "image", "size": [15, 6], "method": m}}])
    xf("resize_bilinear_same_size", "uint8 [12,16,3] -> [12,16] bilinear (only a cast).", {"image": feat(A, "uint8")},
       [{"resize": {"feature": "image", "size": [12, 16], "method": "BILINEAR"}}])
    xf("resize_bilinear_2x", "uint8 [12,16,3] -> [24,32] bilinear (exactly twice).", {"image": feat(A, "uint8")},
       [{"resize": {"feature": "image", "size": [24, 32], "method": "BILINEAR"}}])
    xf("resize_nearest_2x", "uint8 [12,16,3] -> [24,32] nearest.", {"image": feat(A, "uint8")},
       [{"resize": {"feature": "image", "size": [24, 32], "method": "NEAREST"}}])
    xf("resize_area_half", "uint8 [12,16,3] -> [6,8] area (exactly half).", {"image": feat(A, "uint8")},
       [{"resize": {"feature": "image", "size": [6, 8], "method": "AREA"}}])
    xf("resize_area_to_1x1", "uint8 [12,16,3] -> [1,1] area.", {"image": feat(A, "uint8")},
       [{"resize": {"feature": "image", "size": [1, 1], "method": "AREA"}}])
    xf("resize_bicubic_from_1x1", "float32 [1,1,3] -> [4,5] bicubic.", {"image": feat(f32(1, 1), "float32")},
       [{"resize": {"feature": "image", "size": [4, 5], "method": "BICUBIC"}}])
    xf("resize_bilinear_f64", "float64 [6,5,2] -> [9,4] bilinear.", {"image": feat(photo(6, 5, 2), "float64")},
       [{"resize": {"feature": "image", "size": [9, 4], "method": "BILINEAR"}}])
    xf("resize_nearest_i32", "int32 [5,6,1] -> [8,4] nearest (keeps int32).",
       {"image": feat(rng.randint(-100000, 100000, (5, 6, 1)), "int32")},
       [{"resize": {"feature": "image", "size": [8, 4], "method": "NEAREST"}}])
    xf("resize_bilinear_batch", "uint8 [2,6,8,3] (a batch) -> [2,9,12,3] bilinear.",
       {"image": feat(np.stack([photo_u8(6, 8), photo_u8(6, 8)]), "uint8")},
       [{"resize": {"feature": "image", "size": [9, 12], "method": "BILINEAR"}}])
    xf("resize_bilinear_large", "uint8 [48,64,3] (a file) -> [75,50] bilinear.", {"image": feat(photo_u8(48, 64), "uint8")},
       [{"resize": {"feature": "image", "size": [75, 50], "method": "BILINEAR"}}])
    xf("resize_err_rank2", "uint8 [12,16] (rank 2) -> error.", {"image": feat(A[..., 0], "uint8")},
       [{"resize": {"feature": "image", "size": [6, 8], "method": "BILINEAR"}}])
    xf("resize_err_zero_size", "size [0,5] -> error.", {"image": feat(A, "uint8")},
       [{"resize": {"feature": "image", "size": [0, 5], "method": "BILINEAR"}}])
    xf("resize_err_size_length", "size [6] (one value) -> error.", {"image": feat(A, "uint8")},
       [{"resize": {"feature": "image", "size": [6], "method": "BILINEAR"}}])

    # --- central_crop
    D = photo_u8(17, 23)
    for frac in [0.5, 0.875, 0.33, 1.0]:
        xf("central_crop_%s" % str(frac).replace(".", "p"), "uint8 [17,23,3], fraction %r." % frac,
           {"image": feat(D, "uint8")}, [{"centralCrop": {"feature": "image", "fraction": frac}}])
    xf("central_crop_f32_even", "float32 [16,16,1], fraction 0.5.", {"image": feat(f32(16, 16, 1), "float32")},
       [{"centralCrop": {"feature": "image", "fraction": 0.5}}])
    xf("central_crop_0p875_32", "uint8 [32,32,3], fraction 0.875.", {"image": feat(photo_u8(32, 32), "uint8")},
       [{"centralCrop": {"feature": "image", "fraction": 0.875}}])
    xf("central_crop_tiny", "uint8 [3,3,1], fraction 0.1 -> [1,1,1].", {"image": feat(photo_u8(3, 3, 1), "uint8")},
       [{"centralCrop": {"feature": "image", "fraction": 0.1}}])
    xf("central_crop_batch", "float32 [2,9,11,3], fraction 0.6.",
       {"image": feat(np.stack([f32(9, 11), f32(9, 11)]), "float32")},
       [{"centralCrop": {"feature": "image", "fraction": 0.6}}])
    for name, frac in [("zero", 0.0), ("above_one", 1.5)]:
        xf("central_crop_err_%s" % name, "fraction %r -> error." % frac, {"image": feat(D, "uint8")},
           [{"centralCrop": {"feature": "image", "fraction": frac}}])
    xf("central_crop_err_rank2", "uint8 [17,23] (rank 2) -> error.", {"image": feat(D[..., 0], "uint8")},
       [{"centralCrop": {"feature": "image", "fraction": 0.5}}])

    # --- resize_with_crop_or_pad
    for name, (h, w) in [("crop_both", (10, 12)), ("pad_both", (21, 30)), ("crop_h_pad_w", (11, 28)),
                         ("pad_h_crop_w", (24, 8)), ("odd_crop", (14, 20)), ("odd_pad", (20, 26)), ("same", (17, 23))]:
        xf("crop_or_pad_%s" % name, "uint8 [17,23,3] -> %dx%d." % (h, w), {"image": feat(D, "uint8")},
           [{"resizeWithCropOrPad": {"feature": "image", "height": h, "width": w}}])
    xf("crop_or_pad_f32", "float32 [10,14,3] -> 13x9.", {"image": feat(C, "float32")},
       [{"resizeWithCropOrPad": {"feature": "image", "height": 13, "width": 9}}])
    xf("crop_or_pad_batch", "uint8 [2,5,6,1] -> 8x3.",
       {"image": feat(np.stack([photo_u8(5, 6, 1), photo_u8(5, 6, 1)]), "uint8")},
       [{"resizeWithCropOrPad": {"feature": "image", "height": 8, "width": 3}}])
    xf("crop_or_pad_err_zero", "target width 0 -> error.", {"image": feat(D, "uint8")},
       [{"resizeWithCropOrPad": {"feature": "image", "height": 10, "width": 0}}])
    xf("crop_or_pad_err_rank2", "uint8 [17,23] (rank 2) -> error.", {"image": feat(D[..., 0], "uint8")},
       [{"resizeWithCropOrPad": {"feature": "image", "height": 10, "width": 10}}])

    # --- convert_image_dtype
    E = photo_u8(6, 7)
    spread = (rng.uniform(-0.3, 1.3, (5, 6, 3))).astype(np.float32)
    spread.reshape(-1)[:6] = [0.0, 1.0, -0.0, 0.5, 1.0 / 255, 254.5 / 255.5]
    unit = f32(5, 6)
    cid = [
        ("u8_to_f32", E, "uint8", "FLOAT32", False, "uint8 -> float32 (x / 255)."),
        ("f32_to_u8", unit, "float32", "UINT8", False, "float32 in [0,1] -> uint8 (x * 255.5, truncated)."),
        ("f32_to_u8_saturate", spread, "float32", "UINT8", True,
         "float32 in [-0.3,1.3] -> uint8, saturate: clipped to [0,255]."),
        ("f32_to_i16_saturate", spread, "float32", "INT16", True, "float32 in [-0.3,1.3] -> int16, saturate."),
        ("u8_to_i32", E, "uint8", "INT32", False, "uint8 -> int32 (x * 2^23)."),
        ("i32_to_u8", rng.randint(0, 2 ** 31 - 1, (4, 5, 1)), "int32", "UINT8", False,
         "int32 in [0, 2^31) -> uint8 (x // 2^23)."),
        ("i32_to_u8_negative", rng.randint(-2 ** 31, 2 ** 31 - 1, (4, 5, 1)), "int32", "UINT8", False,
         "int32 with negative values -> uint8 (x // 2^23, then the low 8 bits)."),
        ("u8_to_u16", E, "uint8", "UINT16", False, "uint8 -> uint16 (x * 256)."),
        ("u16_to_u8", photo_u16(4, 5), "uint16", "UINT8", False, "uint16 -> uint8 (x // 256)."),
        ("u8_to_i8", E, "uint8", "INT8", False, "uint8 -> int8 (x // 2)."),
        ("i16_to_f32", rng.randint(-32768, 32768, (4, 5, 1)), "int16", "FLOAT32", False, "int16 -> float32 (x / 32767)."),
        ("f32_to_f64", unit, "float32", "FLOAT64", False, "float32 -> float64 (a cast)."),
        ("f64_to_f32", photo(4, 5, 3), "float64", "FLOAT32", False, "float64 -> float32 (a cast)."),
        ("f32_to_f32", unit, "float32", "FLOAT32", False, "float32 -> float32 (unchanged)."),
    ]
    for name, arr, dt, to, sat, desc in cid:
        xf("convert_dtype_%s" % name, desc + " Shape %s." % list(np.shape(arr)), {"image": feat(arr, dt)},
           [{"convertImageDtype": {"feature": "image", "dtype": to, "saturate": sat}}])

    # --- normalize
    xf("normalize_u8_imagenet", "uint8 [8,10,3], ImageNet mean/std in 0..255.", {"image": feat(photo_u8(8, 10), "uint8"),
                                                                               "label": label()},
       [{"normalize": {"feature": "image", "mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375]}}])
    xf("normalize_f32", "float32 [6,7,3], mean/std in 0..1.", {"image": feat(f32(6, 7), "float32")},
       [{"normalize": {"feature": "image", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}}])
    xf("normalize_gray", "uint8 [9,9,1], mean [127.5] std [127.5].", {"image": feat(photo_u8(9, 9, 1), "uint8")},
       [{"normalize": {"feature": "image", "mean": [127.5], "std": [127.5]}}])
    xf("normalize_broadcast_one", "uint8 [5,6,3] with one mean and std for all channels.",
       {"image": feat(photo_u8(5, 6), "uint8")}, [{"normalize": {"feature": "image", "mean": [100.0], "std": [50.0]}}])
    xf("normalize_std_zero", "float32 [3,4,2] with std [0, 2]: x/0 = inf, 0/0 = nan.",
       {"image": feat(np.round(f32(3, 4, 2) * 4) / 4, "float32")},
       [{"normalize": {"feature": "image", "mean": [0.5, 0.5], "std": [0.0, 2.0]}}])
    xf("normalize_f64_input", "float64 [4,4,3] (cast to float32 first).", {"image": feat(photo(4, 4), "float64")},
       [{"normalize": {"feature": "image", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.25, 0.3]}}])
    xf("normalize_i32_output", "int32 [4,3] into `n`.", {"x": feat(rng.randint(-1000, 1000, (4, 3)), "int32")},
       [{"normalize": {"feature": "x", "mean": [1.0, 2.0, 3.0], "std": [10.0, 100.0, 1000.0], "output": "n"}}])
    xf("normalize_err_channels", "mean/std of 2 values for 3 channels -> error.", {"image": feat(photo_u8(5, 6), "uint8")},
       [{"normalize": {"feature": "image", "mean": [1.0, 2.0], "std": [1.0, 2.0]}}])

    # --- per_image_standardization
    xf("standardize_u8", "uint8 [12,16,3].", {"image": feat(A, "uint8")},
       [{"perImageStandardization": {"feature": "image"}}])
    xf("standardize_f32", "float32 [10,14,3].", {"image": feat(C, "float32")},
       [{"perImageStandardization": {"feature": "image"}}])
    xf("standardize_constant", "uint8 [5,5,3] all 77: stddev 0, divided by 1/sqrt(75) -> zeros.",
       {"image": feat(np.full((5, 5, 3), 77), "uint8")}, [{"perImageStandardization": {"feature": "image"}}])
    xf("standardize_nearly_constant", "float32 [4,4,1]: one pixel differs by 1e-3 (stddev below 1/sqrt(16)).",
       {"image": feat(np.where(np.arange(16).reshape(4, 4, 1) == 5, 0.501, 0.5), "float32")},
       [{"perImageStandardization": {"feature": "image"}}])
    xf("standardize_f64", "float64 [5,6,3] (float32 output).", {"image": feat(photo(5, 6), "float64")},
       [{"perImageStandardization": {"feature": "image"}}])
    xf("standardize_batch", "uint8 [2,6,6,3]: each image on its own.",
       {"image": feat(np.stack([photo_u8(6, 6), photo_u8(6, 6)]), "uint8")},
       [{"perImageStandardization": {"feature": "image"}}])
    xf("standardize_large", "uint8 [48,64,3] (a file).", {"image": feat(photo_u8(48, 64), "uint8")},
       [{"perImageStandardization": {"feature": "image"}}])
    xf("standardize_err_rank2", "float32 [4,4] (rank 2) -> error.", {"image": feat(np.zeros((4, 4)), "float32")},
       [{"perImageStandardization": {"feature": "image"}}])

    # --- flips
    F = photo_u8(5, 7)
    xf("flip_lr_u8", "uint8 [5,7,3].", {"image": feat(F, "uint8")}, [{"flipLeftRight": {"feature": "image"}}])
    xf("flip_ud_u8", "uint8 [5,7,3].", {"image": feat(F, "uint8")}, [{"flipUpDown": {"feature": "image"}}])
    xf("flip_lr_f32_batch", "float32 [2,3,4,1].", {"image": feat(np.stack([f32(3, 4, 1), f32(3, 4, 1)]), "float32")},
       [{"flipLeftRight": {"feature": "image"}}])
    xf("flip_ud_i32_output", "int32 [4,3,2] into `f`.", {"x": feat(rng.randint(-9, 9, (4, 3, 2)), "int32")},
       [{"flipUpDown": {"feature": "x", "output": "f"}}])
    xf("flip_lr_err_rank2", "uint8 [5,7] (rank 2) -> error.", {"image": feat(F[..., 0], "uint8")},
       [{"flipLeftRight": {"feature": "image"}}])

    # --- adjust_brightness / adjust_contrast
    G = f32(6, 8)
    H = photo_u8(7, 9)
    xf("brightness_f32_up", "float32 [6,8,3] + 0.1 (no clipping).", {"image": feat(G, "float32")},
       [{"adjustBrightness": {"feature": "image", "delta": 0.1}}])
    xf("brightness_f32_down", "float32 [6,8,3] - 0.3.", {"image": feat(G, "float32")},
       [{"adjustBrightness": {"feature": "image", "delta": -0.3}}])
    xf("brightness_u8_up", "uint8 [7,9,3] + 0.2 (in [0,1] units; saturated to 255).", {"image": feat(H, "uint8")},
       [{"adjustBrightness": {"feature": "image", "delta": 0.2}}])
    xf("brightness_f64", "float64 [4,5,3] + 0.05 (computed in float32, returned as float64).",
       {"image": feat(photo(4, 5), "float64")}, [{"adjustBrightness": {"feature": "image", "delta": 0.05}}])
    for name, arr, dt, fac in [("f32_up", G, "float32", 1.8), ("f32_down", G, "float32", 0.3),
                               ("f32_negative", G, "float32", -1.0),
                               ("u8_up", H, "uint8", 2.0), ("u8_down", H, "uint8", 0.5)]:
        xf("contrast_%s" % name, "%s %s, factor %r." % (dt, list(arr.shape), fac), {"image": feat(arr, dt)},
           [{"adjustContrast": {"feature": "image", "factor": fac}}])
    xf("contrast_f32_batch", "float32 [2,4,5,3], factor 1.5: each image's own mean.",
       {"image": feat(np.stack([f32(4, 5), f32(4, 5)]), "float32")},
       [{"adjustContrast": {"feature": "image", "factor": 1.5}}])

    # --- random ops: only errors that do not depend on the draw
    xf("random_crop_err_too_large", "random_crop of [20,5,3] from [12,16,3] -> error.", {"image": feat(A, "uint8")},
       [{"randomCrop": {"feature": "image", "size": [20, 5, 3]}}])
    xf("random_crop_err_rank", "random_crop size [5,5] for a rank-3 image -> error.", {"image": feat(A, "uint8")},
       [{"randomCrop": {"feature": "image", "size": [5, 5]}}])
    xf("random_brightness_err_negative", "random_brightness with max_delta -0.1 -> error.", {"image": feat(A, "uint8")},
       [{"randomBrightness": {"feature": "image", "maxDelta": -0.1}}])
    xf("random_contrast_err_order", "random_contrast with lower 0.5 > upper 0.4 -> error.", {"image": feat(A, "uint8")},
       [{"randomContrast": {"feature": "image", "lower": 0.5, "upper": 0.4}}])
    xf("random_flip_err_rank2", "random_flip_left_right of a rank-2 tensor -> error.", {"image": feat(A[..., 0], "uint8")},
       [{"randomFlipLeftRight": {"feature": "image"}}])

    # --- chains
    raw = photo_u8(6, 5).transpose(2, 0, 1).tobytes()  # CHW bytes
    xf("chain_raw_chw_to_hwc", "decode_raw of 90 CHW bytes -> reshape [3,6,5] -> transpose [1,2,0] -> cast float32 -> "
       "scale 1/255.", {"value": sfeat(raw)},
       [{"decodeRaw": {"feature": "value", "outType": "UINT8"}}, {"reshape": {"feature": "value", "shape": [3, 6, 5]}},
        {"transpose": {"feature": "value", "perm": [1, 2, 0]}}, {"cast": {"feature": "value", "dtype": "FLOAT32"}},
        {"scale": {"feature": "value", "multiply": 1 / 255}}])
    jpg = "%s/images/jpeg_420_q75_33x17.jpg" % TDIR
    jfeat = (tf.constant(open(path(jpg), "rb").read()), file_string_json(jpg))
    xf("chain_jpeg_resize_normalize", "decode_image (JPEG 33x17) -> resize [24,24] bilinear -> normalize (ImageNet).",
       {"image": jfeat, "label": label()},
       [{"decodeImage": {"feature": "image", "channels": 3}},
        {"resize": {"feature": "image", "size": [24, 24], "method": "BILINEAR"}},
        {"normalize": {"feature": "image", "mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375]}}])
    xf("chain_jpeg_crop_resize_convert", "decode_image (JPEG) -> central_crop 0.875 -> resize [20,20] area -> "
       "convert_image_dtype float32 (x/255).", {"image": jfeat},
       [{"decodeImage": {"feature": "image", "channels": 3}}, {"centralCrop": {"feature": "image", "fraction": 0.875}},
        {"resize": {"feature": "image", "size": [20, 20], "method": "AREA"}},
        {"convertImageDtype": {"feature": "image", "dtype": "FLOAT32"}}])
    png_rel = "%s/images/png_rgba8_17x33.png" % TDIR
    pfeat = (tf.constant(open(path(png_rel), "rb").read()), file_string_json(png_rel))
    xf("chain_png_convert_flip_adjust", "decode_image (PNG RGBA, channels 3) -> convert_image_dtype float32 -> "
       "flip_left_right -> adjust_brightness 0.1 -> adjust_contrast 1.3.", {"image": pfeat},
       [{"decodeImage": {"feature": "image", "channels": 3}},
        {"convertImageDtype": {"feature": "image", "dtype": "FLOAT32"}}, {"flipLeftRight": {"feature": "image"}},
        {"adjustBrightness": {"feature": "image", "delta": 0.1}}, {"adjustContrast": {"feature": "image", "factor": 1.3}}])
    xf("chain_cifar_like", "uint8 [32,32,3] -> cast float32 -> resize_with_crop_or_pad 24x24 -> per_image_standardization.",
       {"image": feat(photo_u8(32, 32), "uint8")},
       [{"cast": {"feature": "image", "dtype": "FLOAT32"}},
        {"resizeWithCropOrPad": {"feature": "image", "height": 24, "width": 24}},
        {"perImageStandardization": {"feature": "image"}}])
    xf("chain_slice_reshape_drop", "slice `value` [1..13) into `image` -> reshape [2,2,3] -> drop `value`.",
       {"value": feat(rng.randint(0, 256, 13), "uint8")},
       [{"slice": {"feature": "value", "begin": [1], "size": [12], "output": "image"}},
        {"reshape": {"feature": "image", "shape": [2, 2, 3]}}, {"drop": {"features": ["value"]}}])
    xf("chain_err_in_middle", "decode_raw -> reshape [5,5] of 24 values (error at transform 1) -> cast.",
       {"value": sfeat(bytes(range(24)))},
       [{"decodeRaw": {"feature": "value", "outType": "UINT8"}}, {"reshape": {"feature": "value", "shape": [5, 5]}},
        {"cast": {"feature": "value", "dtype": "FLOAT32"}}])
    xf("chain_decode_gray_resize_nearest", "decode_image (grayscale JPEG as 1 channel) -> resize [10,10] nearest -> "
       "flip_up_down.", {"image": (tf.constant(open(path("%s/images/jpeg_gray_q75_7x5.jpg" % TDIR), "rb").read()),
                                  file_string_json("%s/images/jpeg_gray_q75_7x5.jpg" % TDIR))},
       [{"decodeImage": {"feature": "image", "channels": 1}},
        {"resize": {"feature": "image", "size": [10, 10], "method": "NEAREST"}}, {"flipUpDown": {"feature": "image"}}])

    # uint8 outputs of adjust_contrast depend on a mean: make sure no value sits near a rounding edge.
    for name, fac in [("u8_up", 2.0), ("u8_down", 0.5)]:
        x = H.astype(np.float64) * np.float64(np.float32(1 / 255))
        mean = x.mean(axis=(0, 1), keepdims=True)
        margin = u8_margin(np.clip(((x - mean) * fac + mean) * 255.5, 0, 255))
        assert margin > 1e-4, (name, margin)
    return entries


# ----------------------------------------------------------------------------------------------
# transform_pipeline


def record_pipeline(case_id, description, rel, records, record_bytes, transforms, tf_call):
    write_bytes(rel, b"".join(records))
    ds = tf.data.FixedLengthRecordDataset([path(rel)], record_bytes)

    def fn(record):
        out, err = apply_transforms({"value": tf.io.decode_raw(record, tf.uint8)}, transforms)
        assert err is None, err
        return out

    elements = []
    floats = False
    for i, feats in enumerate(ds.map(fn)):
        key = "%s:%d" % (rel, i)
        elements.append({"key": key, "features": {k: tensor_out_json("%s.%d" % (case_id, i), k, v)
                                                  for k, v in sorted(feats.items())}})
        floats = floats or any(v.dtype.is_floating for v in feats.values())
    assert len(elements) == len(records)
    case = {
        "id": case_id, "category": "transform_pipeline", "op": "tf.data.FixedLengthRecordDataset.map",
        "description": description, "tf_call": tf_call,
        "inputs": {"files": [rel], "record_bytes": record_bytes, "raw_out_type": "UINT8", "transforms": transforms},
        "expected": {"status": "ok", "elements": elements},
        "tolerance": tolerance_of(transforms, floats),
    }
    return write_case(case)


def record_pipelines():
    entries = []
    records = []
    for _ in range(20):
        label = rng.randint(0, 10)
        image = photo_u8(32, 32).transpose(2, 0, 1)  # CIFAR-10 stores the red, green, blue planes
        records.append(bytes([label]) + image.tobytes())
    transforms = [
        {"slice": {"feature": "value", "begin": [0], "size": [1], "output": "label"}},
        {"slice": {"feature": "value", "begin": [1], "size": [3072], "output": "image"}},
        {"reshape": {"feature": "image", "shape": [3, 32, 32]}},
        {"transpose": {"feature": "image", "perm": [1, 2, 0]}},
        {"cast": {"feature": "image", "dtype": "FLOAT32"}},
        {"resizeWithCropOrPad": {"feature": "image", "height": 24, "width": 24}},
        {"perImageStandardization": {"feature": "image"}},
        {"drop": {"features": ["value"]}},
    ]
    entries.append(record_pipeline(
        "xfp_cifar10_eval", "CIFAR-10's eval input (cifar10_input.py): 20 records of 1 label byte + 3072 image bytes "
        "(CHW), label = bytes [0,1), image = bytes [1,3073) -> [3,32,32] -> HWC -> float32 -> center 24x24 -> "
        "per_image_standardization; the raw `value` dropped.",
        "%s/records/cifar.bin" % TDIR, records, 3073, transforms,
        "tf.data.FixedLengthRecordDataset(files, 3073).map(lambda r: chain({'value': tf.io.decode_raw(r, tf.uint8)})); "
        + tf_call_of(transforms)))

    records = [digit().tobytes() for _ in range(20)]
    transforms = [
        {"scale": {"feature": "value", "multiply": 1 / 255, "add": -0.5}},
        {"reshape": {"feature": "value", "shape": [28, 28, 1]}},
    ]
    entries.append(record_pipeline(
        "xfp_mnist", "An MNIST reader: 20 records of 784 pixel bytes, value * (1/255) - 0.5 -> [28,28,1].",
        "%s/records/mnist.bin" % TDIR, records, 784, transforms,
        "tf.data.FixedLengthRecordDataset(files, 784).map(lambda r: chain({'value': tf.io.decode_raw(r, tf.uint8)})); "
        + tf_call_of(transforms)))
    return entries


def main():
    for sub in ["transforms"] + ["cases/%s" % c for c in ("image_decode", "transform", "transform_pipeline")]:
        shutil.rmtree(path(sub), ignore_errors=True)
    img = record_image_decode()
    xf = record_transform()
    xfp = record_pipelines()
    replace_cases("img_", img)
    replace_cases("xf_", xf)
    replace_cases("xfp_", xfp)


if __name__ == "__main__":
    main()
