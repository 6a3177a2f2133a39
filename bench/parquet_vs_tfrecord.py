#!/usr/bin/env python3
"""The tabular rows as Parquet against the same rows as TFRecord Examples, read by a
Python trainer (the readerd package's native client), rounds alternating in one run:
records/s the trainer receives (every tensor touched) and the server's CPU-seconds per
million records (from /proc, the server's utime + stime over the read).

    target/release/readerctl gen-demo --out /tmp/abdata --workloads tabular,tabular_parquet
    python3 bench/parquet_vs_tfrecord.py target/release/readerd /tmp/abdata [--rounds 3]

Needs the readerd package installed (pip install ./client/python). Prints a line per
read and the median of each workload.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import readerd

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_once(addr: str, spec: dict, pid: int) -> tuple[int, float, float]:
    """Records read, seconds, server CPU-seconds."""
    client = readerd.Client(addr)
    cpu, start, records = cpu_seconds(pid), time.perf_counter(), 0
    with client.read(spec) as stream:
        for batch in stream:
            for tensor in batch.values():
                np.asarray(tensor).sum()
            records += len(stream.keys)
    return records, time.perf_counter() - start, cpu_seconds(pid) - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("readerd")
    parser.add_argument("data", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    state = tempfile.mkdtemp()
    server = subprocess.Popen(
        [args.readerd, "--listen", f"127.0.0.1:{port}", "--allow-unauthenticated", "--data-root", str(args.data),
         "--state-dir", state],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        addr = f"127.0.0.1:{port}"
        results: dict[str, list[tuple[float, float]]] = {}
        for _ in range(args.rounds):
            for workload in ("tabular", "tabular_parquet"):
                spec = json.loads((args.data / "specs" / f"{workload}.json").read_text())
                records, seconds, cpu = read_once(addr, spec, server.pid)
                rate, cpu_per_million = records / seconds, cpu / records * 1e6
                results.setdefault(workload, []).append((rate, cpu_per_million))
                print(f"{workload:16} {records} records  {rate:10.0f} records/s  {cpu_per_million:.2f} server CPU-s / 1M records")
        print("median:")
        for workload, runs in results.items():
            rate = statistics.median(r for r, _ in runs)
            cpu = statistics.median(c for _, c in runs)
            print(f"{workload:16} {rate:10.0f} records/s  {cpu:.2f} server CPU-s / 1M records")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
