"""Fixtures: a real readerd server per test, on data the test writes into a temp dir.

Binaries: ``READERD_BIN`` / ``READERCTL_BIN`` if set, else ``<repo>/target/debug/readerd``
and ``<repo>/target/debug/readerctl``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import Server


@pytest.fixture
def data_root(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    return root


@pytest.fixture
def start_server(tmp_path: Path):
    """``start_server(data_root)``: a started :class:`Server`, stopped after the test."""
    servers: list[Server] = []

    def start(data_root: Path) -> Server:
        server = Server(data_root, tmp_path / f"state{len(servers)}", tmp_path / f"readerd{len(servers)}.log")
        servers.append(server)
        server.start()
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def server(start_server, data_root: Path) -> Server:
    return start_server(data_root)
