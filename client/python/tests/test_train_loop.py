"""examples/train_loop.py killed mid-run and restarted ends with the weights of a run
never interrupted (bit for bit)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from helpers import REPO, Server

SCRIPT = REPO / "examples" / "train_loop.py"


def train(server: Server, data_root: Path, state: Path, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), "--addr", server.addr, "--data-spec", str(data_root / "train.json"),
               "--state-file", str(state), "--steps", "60", "--checkpoint-every", "10", *extra]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_killed_and_restarted_training_ends_with_the_same_weights(
    server: Server, data_root: Path, tmp_path: Path
) -> None:
    subprocess.run([sys.executable, str(SCRIPT), "--make-data", str(data_root)], check=True, timeout=120)

    whole = train(server, data_root, tmp_path / "whole.json")
    assert whole.returncode == 0, whole.stderr
    expected = json.loads(whole.stdout)
    assert expected["step"] == 60

    crashed = train(server, data_root, tmp_path / "crashed.json", "--crash-after-steps", "37")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    saved = json.loads((tmp_path / "crashed.json").read_text())
    assert saved["step"] == 30 and saved["token"]

    resumed = train(server, data_root, tmp_path / "crashed.json")
    assert resumed.returncode == 0, resumed.stderr
    got = json.loads(resumed.stdout)
    assert got["step"] == 60
    assert np.array(got["w"]).tobytes() == np.array(expected["w"]).tobytes()
    assert got["b"] == expected["b"] and got["loss"] == expected["loss"]
    # It learned something: the true weights are [1.5, -2.0, 0.5].
    assert np.sign(got["w"]).tolist() == [1.0, -1.0, 1.0]
