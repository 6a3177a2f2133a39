#!/usr/bin/env python3
"""Shares of a readerd profile's CPU by kind of work, as bench/README.md reports them.

    python3 bench/profile_shares.py DATA_DIR/perf-tabular-1.data [more.data ...]

Each file is a `perf record -e cpu-clock -g` profile (bench/replicas.sh PROFILE=1 writes
them). Symbols come from `perf report --no-children --sort symbol -g none`; each symbol
falls in the first kind whose patterns it contains, in the order below.
"""

import re
import subprocess
import sys

KINDS = [
    ("page-cache copies", ["_copy_to_iter"]),
    ("parse_example", ["ExampleParser::parse_into"]),
    ("scheduling and wake-ups", ["finish_task_switch", "_raw_spin_unlock_irqrestore", "try_to_wake_up", "futex",
                                 "schedule", "__lll_lock", "syscall_exit", "do_syscall", "entry_SYSCALL",
                                 "native_queued", "pick_next", "update_", "enqueue", "dequeue", "__switch_to",
                                 "psi_"]),
    ("malloc and free", ["malloc", "_int_free", "cfree", "unlink_chunk", "realloc", "free"]),
    ("memmove", ["memmove"]),
    ("network", ["tcp_", "ip_", "__dev_queue", "skb", "sock_", "__GI___writev", "net_", "loopback"]),
    ("crc32c", ["crc32c"]),
]


def shares(path):
    report = subprocess.run(
        ["perf", "report", "-i", path, "--no-children", "--sort", "symbol", "-g", "none", "--stdio"],
        capture_output=True, text=True, check=True).stdout
    totals = {name: 0.0 for name, _ in KINDS}
    other = 0.0
    for line in report.splitlines():
        match = re.match(r"\s*([\d.]+)%\s+\[.\]\s+(.*)", line)
        if not match:
            continue
        percent, symbol = float(match.group(1)), match.group(2)
        kind = next((name for name, patterns in KINDS if any(p in symbol for p in patterns)), None)
        if kind is None:
            other += percent
        else:
            totals[kind] += percent
    return totals, other


for path in sys.argv[1:]:
    totals, other = shares(path)
    print(path + ": " + " | ".join(f"{name} {share:.1f}%" for name, share in totals.items()) + f" | other {other:.1f}%")
