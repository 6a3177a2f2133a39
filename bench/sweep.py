#!/usr/bin/env python3
"""A sweep of four trainers on one dataset: four private streams against one shared
reader read by four jobs (DESIGN.md, "Jobs on one shared reader"), each a Python trainer
(the readerd package's native client, every tensor touched), rounds alternating in one
run. Per mode: the server's CPU-seconds per job-epoch (its utime + stime over the round,
from /proc, divided by the four jobs), the records/s each job received (the slowest and
the fastest), and the server's peak RSS (a fresh server per round: its VmHWM); for a shared
round also how often jobs fell behind the window and the elements they decoded alone.

    target/release/readerctl gen-demo --out /tmp/abdata --workloads tabular,images
    python3 bench/sweep.py target/release/readerd /tmp/abdata [--workloads tabular,images] [--rounds 3]

Needs the readerd package installed (pip install ./client/python).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
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
JOBS = 4


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def trainer(addr: str, spec: dict, shared_name: str, job: str, start, results) -> None:
    """One job: reads every element, touching every tensor; reports (records, seconds)."""
    client = readerd.Client(addr)
    start.wait()
    began, records = time.perf_counter(), 0
    options = {"shared_name": shared_name, "job": job} if shared_name else {}
    with client.read(spec, **options) as stream:
        for batch in stream:
            for tensor in batch.values():
                if isinstance(tensor, readerd.Strings):
                    len(tensor)
                else:
                    np.asarray(tensor).sum()
            records += len(stream.keys)
    results.put((job, records, time.perf_counter() - began))


def one_round(readerd_bin: str, data: Path, spec: dict, mode: str, round_no: int, perf: Path | None,
              dwarf: bool = False) -> dict:
    port = free_port()
    state = tempfile.mkdtemp()
    server = subprocess.Popen(
        [readerd_bin, "--listen", f"127.0.0.1:{port}", "--allow-unauthenticated", "--data-root", str(data),
         "--state-dir", state],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        addr = f"127.0.0.1:{port}"
        shared_name = f"sweep{round_no}" if mode == "shared" else ""
        start = multiprocessing.Barrier(JOBS + 1)
        results: multiprocessing.Queue = multiprocessing.Queue()
        workers = [
            multiprocessing.Process(target=trainer, args=(addr, spec, shared_name, f"job{i}", start, results))
            for i in range(JOBS)
        ]
        for worker in workers:
            worker.start()
        profiler = None
        if perf is not None:
            out = perf / f"perf-{mode}-{round_no}.data"
            stacks = ["--call-graph", "dwarf,8192", "-F", "1000"] if dwarf else ["-g"]
            profiler = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", *stacks, "-p", str(server.pid), "-o", str(out)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        cpu_before = cpu_seconds(server.pid)
        start.wait()
        jobs = [results.get(timeout=3600) for _ in workers]
        for worker in workers:
            worker.join()
        cpu = cpu_seconds(server.pid) - cpu_before
        jobs_stats = readerd.Client(addr).stats("", shared_name).get("jobs", []) if shared_name else []
        if profiler is not None:
            profiler.send_signal(2)
            profiler.wait()
        return {
            "records": [r for _, r, _ in jobs],
            "rates": sorted(r / s for _, r, s in jobs),
            "cpu_per_job_epoch": cpu / JOBS,
            "peak_rss_mib": peak_rss_mib(server.pid),
            # Shared: how often jobs fell behind the window, and the elements they decoded alone.
            "fallbacks": sum(int(job.get("detachments", 0)) for job in jobs_stats),
            "decoded_alone": sum(int(job.get("elementsDecoded", 0)) for job in jobs_stats),
        }
    finally:
        server.kill()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("readerd")
    parser.add_argument("data", type=Path)
    parser.add_argument("--workloads", default="tabular,images")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--perf", type=Path, help="a folder: `perf record` the server of each round there")
    parser.add_argument("--dwarf", action="store_true",
                        help="with --perf: DWARF call graphs at 1 kHz (for bench/profile_owners.py)")
    args = parser.parse_args()
    for workload in args.workloads.split(","):
        spec = json.loads((args.data / "specs" / f"{workload}.json").read_text())
        runs: dict[str, list[dict]] = {"private": [], "shared": []}
        for round_no in range(args.rounds):
            for mode in ("private", "shared"):
                run = one_round(args.readerd, args.data, spec, mode, round_no, args.perf, args.dwarf)
                assert len(set(run["records"])) == 1, f"every job reads every record: {run['records']}"
                runs[mode].append(run)
                print(f"{workload:8} {mode:8} {run['records'][0]} records/job  "
                      f"slowest {run['rates'][0]:9.0f} fastest {run['rates'][-1]:9.0f} records/s per job  "
                      f"{run['cpu_per_job_epoch']:.2f} server CPU-s per job-epoch  peak RSS {run['peak_rss_mib']:.0f} MiB"
                      + (f"  fallbacks {run['fallbacks']}, elements decoded alone {run['decoded_alone']}"
                         if mode == "shared" else ""),
                      flush=True)
        print(f"{workload} median of {args.rounds} rounds:")
        # Each round's private and shared runs are back to back: their ratio is steadier
        # than either figure on a machine whose speed drifts.
        ratios = [p["cpu_per_job_epoch"] / s["cpu_per_job_epoch"] for p, s in zip(runs["private"], runs["shared"])]
        print(f"  private ÷ shared server CPU, per round: {', '.join(f'{r:.2f}' for r in ratios)}; "
              f"median {statistics.median(ratios):.2f}", flush=True)
        for mode, mode_runs in runs.items():
            slowest = statistics.median(run["rates"][0] for run in mode_runs)
            cpu = statistics.median(run["cpu_per_job_epoch"] for run in mode_runs)
            rss = statistics.median(run["peak_rss_mib"] for run in mode_runs)
            print(f"  {mode:8} slowest job {slowest:9.0f} records/s  {cpu:.2f} server CPU-s per job-epoch  "
                  f"peak RSS {rss:.0f} MiB", flush=True)


if __name__ == "__main__":
    main()
