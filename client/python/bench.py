#!/usr/bin/env python3
"""Loopback throughput of readerd's Python client against bare Arrow Flight, in one run
(the readerd package must be installed: ``pip install ./client/python``).

Writes an images-like dataset (tf.train.Example: a ~110 KB ``image`` bytes feature,
``label`` int64, ``shape`` int64x3), starts a readerd on it (unless ``--addr`` is given),
then reads the same ticket repeatedly with

  (a) ``pyarrow.flight`` ``do_get`` reading every chunk (the transport's limit),
  (b) ``readerd.Client.read`` (the native client) yielding ``{feature: tensor}`` dicts,
      touching every value (``len()`` of each image as a zero-copy view), and
  (c) the Rust client over readerd.v1 gRPC (``readerctl bench``, one consumer),

and reports records/s and MB/s (bytes of decoded tensors delivered) of each, the time
to the first batch and the ratio (b)/(a) of records/s. Prints a table, then one JSON line.

    python3 client/python/bench.py                    # readerd from target/debug
    python3 client/python/bench.py --readerd target/release/readerd --records 400 --epochs 5
    python3 client/python/bench.py --addr 127.0.0.1:50051 --data-dir DIR   # DIR: a data root of that server
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import pyarrow.flight as flight

import readerd
from readerd.tfrecord import common_prefix, example, write_tfrecord

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from python_trainer import start_readerd, touch  # noqa: E402  (one copy of each)

IMAGE_BYTES = 110 * 1024


def write_images(path: Path, records: int) -> None:
    """``records`` Examples; the images share all but their last 16 bytes (cheap CRCs)."""
    rng = np.random.RandomState(0)
    common = rng.bytes(IMAGE_BYTES - 16)
    items = [
        example({"image": common + rng.bytes(16), "label": i % 100, "shape": [224, 224, 3]})
        for i in range(records)
    ]
    write_tfrecord(path, items, common_prefix(items[0], items[1]))


def spec(batch_size: int, epochs: int) -> dict:
    return {
        "source": {"files": ["images.tfrecord"], "format": "TFRECORD"},
        "decoder": {"example": {"features": {
            "image": {"fixedLen": {"dtype": "STRING", "shape": []}},
            "label": {"fixedLen": {"dtype": "INT64", "shape": []}},
            "shape": {"fixedLen": {"dtype": "INT64", "shape": [3]}},
        }}},
        "pipeline": {"batchSize": batch_size, "numEpochs": epochs},
    }  # fmt: skip


def bare_flight(addr: str, request: dict) -> tuple[int, int, float]:
    """(a): every chunk of the ticket with pyarrow alone; (records, bytes, first batch s)."""
    started, first, records, size = time.perf_counter(), 0.0, 0, 0
    client = flight.FlightClient(f"grpc://{addr}")
    reader = client.do_get(flight.Ticket(json.dumps(request).encode()))
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        if chunk.data is not None:
            if not records:
                first = time.perf_counter() - started
            records += chunk.data.num_rows
            size += chunk.data.get_total_buffer_size()
        elif b"end_of_sequence" in chunk.app_metadata.to_pybytes():
            break
    reader.cancel()
    client.close()
    return records, size, first


def readerd_client(addr: str, request: dict) -> tuple[int, int, float]:
    """(b): ``readerd.Client.read`` dicts of numpy arrays; (records, bytes, first batch s)."""
    started, first, records, size = time.perf_counter(), 0.0, 0, 0
    with readerd.Client(addr).read(request["spec"]) as stream:
        for batch in stream:
            if not records:
                first = time.perf_counter() - started
            records += len(stream.keys)
            size += sum(touch(t) for t in batch.values())
    return records, size, first


def rust_client(readerctl: str, addr: str, data_dir: Path, request: dict) -> tuple[int, int, float, float]:
    """(c): ``readerctl bench`` (the Rust client, one consumer) on the same spec;
    (records, bytes, seconds, first batch s)."""
    (data_dir / "specs").mkdir(exist_ok=True)
    (data_dir / "specs" / "images.json").write_text(json.dumps(request["spec"]))
    out = subprocess.run(
        [readerctl, "--addr", f"http://{addr}", "bench", "--use-addr", "--data", str(data_dir),
         "--workloads", "images", "--consumers", "1", "--output", "jsonl"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    run = json.loads(out.stdout)["runs"][0]
    return run["records"], run["bytes"], run["seconds"], run["first_batch_ms"] / 1e3


def measure(name: str, run: Callable[[str, dict], tuple[int, int, float]], addr: str, request: dict,
            repeat: int) -> dict:  # fmt: skip
    """The best of ``repeat`` runs (by wall time)."""
    best: Optional[dict] = None
    for _ in range(repeat):
        started = time.perf_counter()
        records, size, first = run(addr, request)
        seconds = time.perf_counter() - started
        result = {"name": name, "records": records, "bytes": size, "seconds": seconds, "first_batch_s": first,
                  "records_per_s": records / seconds, "mb_per_s": size / seconds / 1e6}  # fmt: skip
        if best is None or seconds < best["seconds"]:
            best = result
    assert best is not None
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readerd", default=os.environ.get("READERD_BIN", str(REPO / "target" / "debug" / "readerd")))
    parser.add_argument(
        "--readerctl", default=os.environ.get("READERCTL_BIN", str(REPO / "target" / "debug" / "readerctl"))
    )
    parser.add_argument("--addr", help="a running readerd (then --data-dir must be one of its data roots)")
    parser.add_argument("--data-dir", help="where images.tfrecord is written (default: a temp dir)")
    parser.add_argument("--records", type=int, default=400, help="records in the file")
    parser.add_argument("--epochs", type=int, default=20, help="epochs per read (about 0.9 GB: a shorter read is mostly its first batch)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each reader; the best is reported")
    args = parser.parse_args()
    if args.addr and not args.data_dir:
        parser.error("--addr needs --data-dir (a data root of that server)")

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(args.data_dir or tmp)
        if not (data_dir / "images.tfrecord").exists():
            write_images(data_dir / "images.tfrecord", args.records)
        process, addr = (None, args.addr) if args.addr else start_readerd(args.readerd, data_dir, Path(tmp) / "state")
        try:
            request = {"spec": spec(args.batch_size, args.epochs)}
            bare_flight(addr, request)  # warm-up: page cache, connections
            a = measure("pyarrow.flight do_get", bare_flight, addr, request, args.repeat)
            b = measure("readerd.Client.read (numpy)", readerd_client, addr, request, args.repeat)
            runs = [rust_client(args.readerctl, addr, data_dir, request) for _ in range(args.repeat)]
            records, size, seconds, first = min(runs, key=lambda run: run[2])
            c = {"name": "Rust client (readerd.v1)", "records": records, "bytes": size, "seconds": seconds,
                 "first_batch_s": first, "records_per_s": records / seconds, "mb_per_s": size / seconds / 1e6}  # fmt: skip
        finally:
            if process is not None:
                process.kill()
                process.wait()

    assert a["records"] == b["records"], (a["records"], b["records"])
    ratio = b["records_per_s"] / a["records_per_s"]
    print(f"{'reader':<30} {'records':>8} {'MB':>9} {'s':>7} {'records/s':>10} {'MB/s':>8} {'first batch s':>13}")
    for r in (a, b, c):
        print(f"{r['name']:<30} {r['records']:>8} {r['bytes'] / 1e6:>9.1f} {r['seconds']:>7.3f} "
              f"{r['records_per_s']:>10.1f} {r['mb_per_s']:>8.1f} {r['first_batch_s']:>13.3f}")  # fmt: skip
    print(f"ratio (b)/(a) records/s: {ratio:.3f}")
    print(json.dumps({"server": args.addr or args.readerd, "batch_size": args.batch_size, "flight": a,
                      "client": b, "rust_client": c, "ratio": ratio}))  # fmt: skip


if __name__ == "__main__":
    main()
