"""What a Python trainer's loop tells the server: the client measures the time the loop
waits inside ``next()`` (the conversion to numpy included) and the time it spends between
calls, and the server's ``/status.json`` (on ``--metrics-listen``) turns them into an
input-bound fraction per consumer."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path

import readerd
from helpers import Server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lines(root: Path, n: int) -> dict:
    (root / "lines.txt").write_text("".join(f"line {i}\n" for i in range(n)))
    return {"source": {"files": ["lines.txt"], "format": "TEXT_LINE"}}


def consumers(metrics: str, container: str) -> list[dict]:
    with urllib.request.urlopen(f"http://{metrics}/status.json", timeout=10) as answer:
        status = json.load(answer)
    readers = [reader for reader in status["readers"] if reader["container"] == container]
    return [consumer for reader in readers for consumer in reader["consumers"]]


def test_a_python_trainer_stepping_longer_than_the_server_needs_is_not_input_bound(data_root: Path, tmp_path: Path):
    metrics = f"127.0.0.1:{free_port()}"
    server = Server(data_root, tmp_path / "state", tmp_path / "readerd.log", ["--metrics-listen", metrics])
    server.start()
    try:
        spec = lines(data_root, 5000)
        for shared_name in ("shared", ""):
            container = f"python-{shared_name or 'private'}"
            with readerd.Client(server.addr).read(spec, container=container, shared_name=shared_name) as stream:
                started = time.monotonic()
                for _ in stream:
                    time.sleep(0.03)  # the trainer's step
                    if time.monotonic() - started > 3.5:
                        break
                # Reports go out about once a second (a private stream's in the background).
                reported = consumers(metrics, container)
                assert len(reported) == 1, reported
                consumer = reported[0]
                assert consumer["inputBound"] < 0.1, consumer
                assert 10 <= consumer["elementsPerSecond"] <= 34, consumer
                assert consumer["stepSeconds"] >= 2.0, consumer
    finally:
        server.stop()
