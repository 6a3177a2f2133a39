#!/usr/bin/env python3
"""Stalled consumers against the memory budget (issue 55): a readerd with `--memory-budget`
serving N private streams of a spec that each take one element and then stall, the
server's resident memory (VmRSS) and peak (VmHWM) sampled every 5 s, and how many streams
the server ended (its log's "stream failed" lines), and how many read on when their
trainers come back.

    python3 bench/stalled_consumers.py target/release/readerd /tmp/jpeg2000 --budget-mib 1024

DATA: what bench/jpeg_data.py wrote (its jpeg.json is the spec; each stream gets another
seed). Needs the readerd package. A budget the streams fit in keeps every stream alive and
resident memory within the budget plus the batch pool (128 MiB).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import readerd


def status_mib(pid: int, key: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("readerd")
    parser.add_argument("data", type=Path)
    parser.add_argument("--budget-mib", type=int, default=1024)
    parser.add_argument("--consumers", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=30)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    server = subprocess.Popen(
        [args.readerd, "--listen", f"127.0.0.1:{port}", "--allow-unauthenticated", "--data-root", str(args.data),
         "--state-dir", tempfile.mkdtemp(), "--memory-budget", str(args.budget_mib << 20)],
        stdout=subprocess.DEVNULL, stderr=log)  # fmt: skip
    try:
        time.sleep(1)
        spec = json.loads((args.data / "jpeg.json").read_text())
        streams = []
        for i in range(args.consumers):
            one = dict(spec, pipeline=dict(spec["pipeline"], seed=i + 1))
            try:
                stream = readerd.Client(f"127.0.0.1:{port}").read(one)
                next(stream)  # one element taken, then stalled
                streams.append(stream)
            except readerd.ReaderdError as err:
                print(f"consumer {i}: {str(err)[:160]}")
        for t in range(0, args.seconds, 5):
            time.sleep(5)
            print(f"{t + 5:3d} s: server RSS {status_mib(server.pid, 'VmRSS:'):.0f} MiB, "
                  f"peak {status_mib(server.pid, 'VmHWM:'):.0f} MiB (budget {args.budget_mib} MiB)", flush=True)
        failed = sum(1 for line in Path(log.name).read_text().splitlines() if "stream failed" in line)
        print(f"{args.consumers} consumers, {failed} streams ended by the server (see {log.name})")
        # The trainers come back: each stream that is alive gives its next elements.
        alive = 0
        for stream in streams:
            try:
                for _ in range(3):
                    next(stream)
                alive += 1
            except (readerd.ReaderdError, StopIteration) as err:
                print(f"a stream did not read on: {str(err)[:160]}")
        print(f"{alive} of {len(streams)} streams read on after the stall; "
              f"peak RSS {status_mib(server.pid, 'VmHWM:'):.0f} MiB")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
