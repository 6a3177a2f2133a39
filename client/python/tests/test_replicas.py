"""A shared reader served by replicas (readerd processes sharing a PostgreSQL state
store), read from Python with every replica's address: each record exactly once per
epoch, also when a replica is killed with SIGKILL mid-epoch.

Needs ``READERD_TEST_POSTGRES_URL`` (an admin URL; ``.ci/run`` sets it): each test works
in a database of its own, dropped after.
"""

from __future__ import annotations

import collections
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

import readerd
from helpers import Server
from readerd.tfrecord import example, write_tfrecord
from test_stream import in_threads

ADMIN = os.environ.get("READERD_TEST_POSTGRES_URL", "")
pytestmark = pytest.mark.skipif(not ADMIN, reason="READERD_TEST_POSTGRES_URL is not set (.ci/run sets it)")

FILES, PER_FILE, EPOCHS = 6, 60, 2
SPEC = {
    "source": {"files": ["part-*.tfrecord"], "format": "TFRECORD"},
    "decoder": {"example": {"features": {"id": {"fixedLen": {"dtype": "INT64", "shape": []}}}}},
    "pipeline": {"seed": 5, "shuffleFiles": True, "shuffle": {"bufferSize": 16}, "numEpochs": EPOCHS, "batchSize": 4},
}


@pytest.fixture
def database():
    """The URL of a new database, dropped after the test."""
    name = f"readerd_py_{os.getpid()}_{time.monotonic_ns()}"
    subprocess.run(["psql", ADMIN, "-qc", f"CREATE DATABASE {name}"], check=True)
    yield ADMIN.rsplit("/", 1)[0] + "/" + name
    subprocess.run(["psql", ADMIN, "-qc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"], check=False)


def write_ids(root: Path) -> set[int]:
    for f in range(FILES):
        write_tfrecord(root / f"part-{f}.tfrecord", [example({"id": f * 1000 + i}) for i in range(PER_FILE)])
    return {f * 1000 + i for f in range(FILES) for i in range(PER_FILE)}


def consume(addrs: str, seen: list[int], slow: float) -> None:
    """One consumer of the shared reader across every replica, to the end."""
    with readerd.Client(addrs).read(SPEC, container="team", shared_name="train") as stream:
        for batch in stream:
            seen.extend(int(i) for i in batch["id"])
            time.sleep(slow)


def test_consumers_read_each_record_once_per_epoch_across_replicas_and_a_replica_kill(
    tmp_path: Path, data_root: Path, database: str
) -> None:
    ids = write_ids(data_root)
    args = ["--state-url", database, "--lease-time", "2s", "--failover-grace", "30s"]
    replicas = [Server(data_root, tmp_path / f"state{i}", tmp_path / f"replica{i}.log", args) for i in range(3)]
    for replica in replicas:
        replica.start()
    try:
        addrs = ",".join(replica.addr for replica in replicas)
        seen: list[list[int]] = [[], []]
        killed_after: list[int] = []

        def kill_mid_epoch() -> None:
            wait_for(lambda: len(seen[0]) + len(seen[1]) >= 200)
            replicas[1].kill()
            killed_after.append(len(seen[0]) + len(seen[1]))

        killer = threading.Thread(target=kill_mid_epoch)
        killer.start()
        in_threads(*[lambda i=i: consume(addrs, seen[i], 0.005) for i in range(2)], timeout=120)
        killer.join()
        assert killed_after and killed_after[0] < len(ids), killed_after  # killed in the first epoch
        counts = collections.Counter(seen[0] + seen[1])
        assert set(counts) == ids
        assert set(counts.values()) == {EPOCHS}, [i for i, n in counts.items() if n != EPOCHS][:10]
        assert seen[0] and seen[1]
    finally:
        for replica in replicas:
            replica.stop()


def wait_for(condition, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
