#!/usr/bin/env python3
"""A tiny logistic-regression trainer (numpy) fed by readerd, that survives being killed.

Every ``--checkpoint-every`` steps it asks the stream for a checkpoint token and saves the
token, the step and the weights to ``--state-file`` (atomically). Started again with the
same state file it resumes the stream from the saved token and the weights from the file,
so a run killed at any point (``--crash-after-steps`` SIGKILLs itself, as a crash would)
and restarted ends with exactly the weights of a run never interrupted.

    # data: DIR/train.csv (id, x1, x2, x3, label) and the spec DIR/train.json
    python3 examples/train_loop.py --make-data DIR
    readerd --listen 127.0.0.1:50051 --data-root DIR --allow-unauthenticated &
    python3 examples/train_loop.py --addr 127.0.0.1:50051 --data-spec DIR/train.json \\
        --state-file /tmp/run.json --steps 200 --checkpoint-every 20

The features are the spec's numeric dense features other than ``--label`` and ``id``;
the spec should repeat forever (``numEpochs: -1``) or hold at least ``--steps`` batches.
It prints the final state as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import numpy as np

try:
    import readerd
except ImportError as exc:  # the package has a native core: it must be built and installed
    raise SystemExit("the readerd package is needed: pip install ./client/python") from exc


def make_data(directory: Path, rows: int) -> None:
    """A linearly separable-ish CSV and a spec that batches and shuffles it forever."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.RandomState(0)
    x = rng.normal(size=(rows, 3))
    p = 1.0 / (1.0 + np.exp(-(x @ np.array([1.5, -2.0, 0.5]) + 0.3)))
    label = (rng.uniform(size=rows) < p).astype(int)
    lines = ["id,x1,x2,x3,label"] + [
        f"{i},{a:.6f},{b:.6f},{c:.6f},{y}" for i, ((a, b, c), y) in enumerate(zip(x, label))
    ]
    (directory / "train.csv").write_text("\n".join(lines) + "\n")
    spec = {
        "source": {"files": ["train.csv"], "format": "CSV", "header": True},
        "decoder": {"csv": {"columns": [{"dtype": "INT64"}] + [{"dtype": "FLOAT32"}] * 3 + [{"dtype": "INT64"}]}},
        "pipeline": {"batchSize": 32, "numEpochs": -1, "seed": 1, "shuffle": {"bufferSize": 256}},
    }
    (directory / "train.json").write_text(json.dumps(spec, indent=1))


def save(path: Path, state: dict) -> None:
    """Writes the state file atomically: a crash leaves the old one or the new one."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)


def features(batch: dict, label: str) -> tuple[np.ndarray, np.ndarray]:
    names = sorted(n for n, t in batch.items() if n not in (label, "id") and isinstance(t, np.ndarray))
    x = np.stack([batch[n].astype(np.float64) for n in names], axis=1)
    return x, batch[label].astype(np.float64)


def step(w: np.ndarray, b: float, x: np.ndarray, y: np.ndarray, lr: float) -> tuple[np.ndarray, float, float]:
    """One gradient step of the logistic loss; returns the new weights and the loss."""
    p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
    loss = float(-np.mean(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12)))
    error = p - y
    return w - lr * (x.T @ error) / len(y), b - lr * float(np.mean(error)), loss


def train(args: argparse.Namespace) -> dict:
    path = Path(args.state_file)
    state = json.loads(path.read_text()) if path.exists() else {"step": 0, "token": None, "w": None, "b": 0.0}
    if state["step"] >= args.steps:
        return state
    w = None if state["w"] is None else np.array(state["w"], dtype=np.float64)
    b = float(state["b"])
    client = readerd.Client(args.addr)
    spec = json.loads(Path(args.data_spec).read_text())
    # Resuming: the token knows the spec and continues right after the saved step's batch.
    stream = client.read(None if state["token"] else spec, resume=state["token"])
    with stream:
        for batch in stream:
            x, y = features(batch, args.label)
            if w is None:
                w = np.zeros(x.shape[1])
            w, b, loss = step(w, b, x, y, args.lr)
            state.update(step=state["step"] + 1, loss=loss)
            if state["step"] % args.checkpoint_every == 0 or state["step"] == args.steps:
                state.update(token=stream.checkpoint(), w=w.tolist(), b=b)
                save(path, state)
            if state["step"] == args.crash_after_steps:
                os.kill(os.getpid(), signal.SIGKILL)
            if state["step"] >= args.steps:
                break
    state.update(w=None if w is None else w.tolist(), b=b)
    save(path, state)
    return state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--make-data", metavar="DIR", help="write DIR/train.csv and DIR/train.json, then exit")
    parser.add_argument("--rows", type=int, default=2000, help="rows of --make-data")
    parser.add_argument("--addr", default="127.0.0.1:50051", help="readerd address (host:port), or several replicas' (a,b,c): the first that answers")
    parser.add_argument("--data-spec", help="dataset spec JSON (proto3 JSON of readerd.v1.DatasetSpec)")
    parser.add_argument("--state-file", help="where the step, token and weights are saved")
    parser.add_argument("--steps", type=int, default=200, help="train this many steps (batches) in all")
    parser.add_argument("--checkpoint-every", type=int, default=20, help="save a checkpoint every N steps")
    parser.add_argument("--lr", type=float, default=0.5, help="learning rate")
    parser.add_argument("--label", default="label", help="the label feature")
    parser.add_argument("--crash-after-steps", type=int, default=0, help="SIGKILL itself after this step (tests)")
    args = parser.parse_args()
    if args.make_data:
        make_data(Path(args.make_data), args.rows)
        return
    if not (args.data_spec and args.state_file):
        parser.error("--data-spec and --state-file are required to train")
    print(json.dumps(train(args)))


if __name__ == "__main__":
    main()
