#!/usr/bin/env python3
"""Is `replicasRecommended` right? (issue 55) Input-bound trainers on the `jpeg` workload
(decoding and augmenting on the server) read one shared reader served by replicas capped
at CAP cores each; the status's recommendation for one replica is then tried.

    python3 bench/replicas_recommended.py /tmp/jpeg2000 [--cap 0.25] [--consumers 4] \\
        [--step-ms 540] [--seconds 30]

DATA: what bench/jpeg_data.py wrote (its endless `jpeg.json` is the spec). Each consumer is
`readerctl read --step-ms STEP` (a trainer that takes STEP ms a batch of 64 images and
reports its time with its acknowledgements), reading from every replica. First one
replica: the consumers wait for it, and `readerctl stats` gives their input-bound
fraction and the replicas it recommends so that they wait at most 10% of their time. Then
that many replicas: the consumers' wait and throughput with them. Needs root (cgroup v1
`cpu.cfs_quota_us` under /sys/fs/cgroup/cpu), PostgreSQL on 127.0.0.1:5432 (a database of
its own per run, dropped after), and release builds of readerd and readerctl.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

CGROUPS = Path("/sys/fs/cgroup/cpu")
PG = "postgres://postgres@127.0.0.1:5432"
READERD = "target/release/readerd"
READERCTL = "target/release/readerctl"
WARMUP = 10


def psql(database: str, sql: str) -> None:
    subprocess.run(["psql", f"{PG}/{database}", "-qc", sql], check=True, capture_output=True)


def cpu_seconds(processes: list[subprocess.Popen]) -> float:
    """User and system CPU seconds `processes` used so far."""
    total = 0
    for process in processes:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def memory_mib(process: subprocess.Popen, key: str) -> int:
    """`key` of the process's /proc status (VmRSS, VmHWM), in MiB."""
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) // 1024
    return -1


def start_replica(i: int, data: Path, cap: float, state_url: str) -> subprocess.Popen:
    group = CGROUPS / f"readerd-recommend-{i}"
    group.mkdir(exist_ok=True)
    (group / "cpu.cfs_period_us").write_text("100000")
    (group / "cpu.cfs_quota_us").write_text(str(int(cap * 100000)))
    server = subprocess.Popen(
        [READERD, "--listen", f"127.0.0.1:{7400 + i}", "--data-root", str(data), "--state-dir", tempfile.mkdtemp(),
         "--state-url", state_url, "--allow-unauthenticated"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    (group / "cgroup.procs").write_text(str(server.pid))
    for _ in range(100):
        health = [READERCTL, "--addr", f"http://127.0.0.1:{7400 + i}", "health"]
        if subprocess.run(health, capture_output=True).returncode == 0:
            return server
        time.sleep(0.1)
    raise SystemExit(f"replica {i} did not start")


def run(data: Path, replicas: int, args: argparse.Namespace) -> dict:
    """`replicas` replicas and the consumers for `args.seconds`: what the consumers
    received, and the reader's stats at the end."""
    database = f"readerd_recommend_{replicas}_{int(time.time())}"
    psql("postgres", f"CREATE DATABASE {database}")
    servers = [start_replica(i, data, args.cap, f"{PG}/{database}") for i in range(replicas)]
    addrs = ",".join(f"http://127.0.0.1:{7400 + i}" for i in range(replicas))
    name = f"recommend-{replicas}"
    outputs = [tempfile.NamedTemporaryFile("w+", suffix=".txt") for _ in range(args.consumers)]
    consumers = [
        subprocess.Popen(
            [READERCTL, "--addr", addrs, "--quiet", "read", "--container", "bench", "--shared-name", name,
             "--spec", str(data / "jpeg.json"), "--step-ms", str(args.step_ms)],
            stdout=out, stderr=subprocess.DEVNULL)  # fmt: skip
        for out in outputs
    ]
    def batches() -> int:
        received = 0
        for out in outputs:
            with open(out.name) as lines:
                received += sum(1 for line in lines if line.startswith("#"))
        return received

    try:
        # The first WARMUP seconds (replicas leasing their first splits, the first batches
        # decoded at CAP cores) are not measured.
        time.sleep(WARMUP)
        at_start, cpu_at_start = batches(), cpu_seconds(servers)
        time.sleep(args.seconds)
        server_cores = (cpu_seconds(servers) - cpu_at_start) / args.seconds
        stats = subprocess.run(
            [READERCTL, "--addr", "http://127.0.0.1:7400", "stats", "--container", "bench", "--shared-name", name],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        received = batches() - at_start
        lines = dict(line.rsplit(" ", 1) for line in stats.stdout.splitlines() if " " in line)
        bound = lines.get("input-bound")
        return {
            "input_bound": float(bound.rstrip("%")) / 100 if bound and bound.endswith("%") else None,
            "recommended": int(lines["replicas recommended"]),
            "images_per_s": received * 64 / args.seconds,
            "server_cores": server_cores,
            "rss_mib": [memory_mib(server, "VmRSS:") for server in servers],
            "peak_rss_mib": [memory_mib(server, "VmHWM:") for server in servers],
        }
    finally:
        for process in consumers + servers:
            process.kill()
            process.wait()
        for i in range(replicas):
            (CGROUPS / f"readerd-recommend-{i}").rmdir()
        psql("postgres", f"DROP DATABASE {database} WITH (FORCE)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path)
    parser.add_argument("--cap", type=float, default=0.25, help="cores per replica")
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--step-ms", type=int, default=540, help="each consumer's step per batch of 64")
    parser.add_argument("--seconds", type=int, default=30, help="measured, after 10 s of warm-up")
    args = parser.parse_args()
    wanted = args.consumers * 64 * 1000 / args.step_ms
    print(f"{args.consumers} consumers of {args.step_ms} ms a batch: {wanted:.0f} images/s wanted; "
          f"replicas capped at {args.cap} cores")  # fmt: skip
    # One replica, then as many as it recommends.
    replicas = 1
    for _ in range(2):
        result = run(args.data, replicas, args)
        bound = result["input_bound"]
        print(f"{replicas} replica(s) using {result['server_cores']:.2f} cores: {result['images_per_s']:.0f} images/s "
              f"received, consumers input-bound "
              f"{'unknown' if bound is None else f'{100 * bound:.1f}%'}, replicasRecommended {result['recommended']}; "
              f"replicas' RSS {result['rss_mib']} MiB, peak {result['peak_rss_mib']}",
              flush=True)  # fmt: skip
        if result["recommended"] == replicas:
            break
        replicas = result["recommended"]


if __name__ == "__main__":
    main()
