"""A long read keeps the trainer's memory flat (held in hostile testing: 1M records;
kept so)."""

from __future__ import annotations

from pathlib import Path

import readerd
from helpers import Server


def resident_mib() -> float:
    """This process's resident set (VmRSS), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def test_a_million_records_read_with_flat_memory(server: Server, data_root: Path) -> None:
    lines = 1_000_000
    (data_root / "lines.txt").write_text("".join(f"{i:07d}-some-text-of-a-record\n" for i in range(lines)))
    spec = {"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}, "pipeline": {"batchSize": 1000}}
    client = readerd.Client(server.addr)
    records, after_tenth = 0, None
    with client.read(spec) as stream:
        for batch in stream:
            records += len(batch["value"])
            if after_tenth is None and records >= lines // 10:
                after_tenth = resident_mib()
    assert records == lines
    growth = resident_mib() - after_tenth
    # Each batch is about 31 KB: a leak of one per batch would be 30 MiB.
    assert growth < 16, f"resident set grew {growth:.1f} MiB over 900,000 records"
