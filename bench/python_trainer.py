#!/usr/bin/env python3
"""A Python trainer against the Rust client, on the same server, files and spec, in one run.

For each workload of DATA_DIR (files and specs written by ``readerctl gen-demo``, or
``gen-demo --specs-only`` over ``../shared/tfdata-bench/gen_data.py``'s files), starts a
release readerd on DATA_DIR and reads the workload's spec (``DATA_DIR/specs/<w>.json``)
to its end, ROUNDS times each, with

  - the Rust client: ``readerctl bench --use-addr`` with one consumer;
  - the Python client (``readerd.Client.read``) as a trainer that touches every array of
    every batch: ``.nbytes`` of each numeric array, ``len()`` of each bytes value (as a
    zero-copy ``uint8`` view: ``Strings.view(i)``), as ``tfdata_bench.py``'s client does
    with ``.numpy()``.

It prints, per workload, the best round of each client (records/s, MB/s of decoded
tensors, first batch) and the Python client's share of the Rust client's records/s, then
one JSON line.

    python3 bench/python_trainer.py DATA_DIR [--workloads tabular,tabular_csv,images] [--rounds 2]

The readerd package must be installed (``pip install ./client/python``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import readerd

REPO = Path(__file__).resolve().parents[1]


def start_readerd(binary: str, data: Path, state: Path) -> tuple[subprocess.Popen, str]:
    command = [binary, "--listen", "127.0.0.1:0", "--data-root", str(data), "--state-dir", str(state),
               "--allow-unauthenticated"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("listening on "):
            return process, line.split()[-1]
    raise RuntimeError(f"{binary} exited without listening")


def touch(tensor: readerd.Tensor) -> int:
    """Every array of a tensor touched as a trainer would; its decoded bytes."""
    if isinstance(tensor, readerd.Strings):
        return sum(len(tensor.view(i)) for i in range(tensor.size))
    if isinstance(tensor, np.ndarray):
        return tensor.nbytes
    if isinstance(tensor, readerd.Sparse):
        return tensor.indices.nbytes + touch(tensor.values) + tensor.dense_shape.nbytes
    return touch(tensor.flat_values) + sum(s.nbytes for s in tensor.nested_row_splits)


def python_trainer(addr: str, spec: dict) -> dict:
    started = time.perf_counter()
    first, records, size = 0.0, 0, 0
    with readerd.Client(addr).read(spec) as stream:
        for batch in stream:
            if not records:
                first = time.perf_counter() - started
            records += len(stream.keys)
            size += sum(touch(t) for t in batch.values())
    seconds = time.perf_counter() - started
    return {"records": records, "bytes": size, "seconds": seconds, "first_batch_s": first}


def rust_client(readerctl: str, addr: str, data: Path, workload: str) -> dict:
    out = subprocess.run(
        [readerctl, "--addr", f"http://{addr}", "bench", "--use-addr", "--data", str(data),
         "--workloads", workload, "--consumers", "1", "--output", "jsonl"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    run = json.loads(out.stdout)["runs"][0]
    return {"records": run["records"], "bytes": run["bytes"], "seconds": run["seconds"],
            "first_batch_s": run["first_batch_ms"] / 1e3}  # fmt: skip


def best(runs: list[dict]) -> dict:
    run = min(runs, key=lambda r: r["seconds"])
    return {**run, "records_per_s": run["records"] / run["seconds"], "mb_per_s": run["bytes"] / run["seconds"] / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--workloads", default="tabular,tabular_csv,images")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--readerd", default=str(REPO / "target" / "release" / "readerd"))
    parser.add_argument("--readerctl", default=str(REPO / "target" / "release" / "readerctl"))
    args = parser.parse_args()

    results = []
    print(f"{'workload':<12} {'client':<26} {'records/s':>12} {'MB/s':>9} {'first batch s':>13} {'py/rust':>8}")
    for workload in args.workloads.split(","):
        spec = json.loads((args.data / "specs" / f"{workload}.json").read_text())
        with tempfile.TemporaryDirectory() as state:
            process, addr = start_readerd(args.readerd, args.data, Path(state))
            try:
                python_trainer(addr, spec)  # warm-up: page cache, connections
                rust = best([rust_client(args.readerctl, addr, args.data, workload) for _ in range(args.rounds)])
                python = best([python_trainer(addr, spec) for _ in range(args.rounds)])
            finally:
                process.kill()
                process.wait()
        assert rust["records"] == python["records"], (rust["records"], python["records"])
        share = python["records_per_s"] / rust["records_per_s"]
        for name, r in (("Rust client (readerctl)", rust), ("Python client, touching all", python)):
            print(f"{workload:<12} {name:<26} {r['records_per_s']:>12.0f} {r['mb_per_s']:>9.1f} "
                  f"{r['first_batch_s']:>13.3f} {share if r is python else 1.0:>8.2f}")  # fmt: skip
        results.append({"workload": workload, "rust": rust, "python": python, "python_share": share})
    print(json.dumps({"rounds": args.rounds, "results": results}))


if __name__ == "__main__":
    main()
