"""Test helpers: a readerd process, ``readerctl read`` and the golden JSON form of tensors."""

from __future__ import annotations

import base64
import json
import math
import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Optional

import numpy as np

import readerd

REPO = Path(__file__).resolve().parents[3]


def _die_with_parent() -> None:
    """In the child: SIGKILL when the thread that started it dies (Linux), so no server
    outlives the tests (used from the main thread only)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def binary(name: str) -> str:
    """The path of ``name`` (``READERD_BIN`` / ``READERCTL_BIN``, else the debug build);
    waits a while if it is missing (it may be being rebuilt)."""
    path = Path(os.environ.get(f"{name.upper()}_BIN") or REPO / "target" / "debug" / name)
    deadline = time.monotonic() + 120
    while not path.exists():
        if time.monotonic() > deadline:
            raise FileNotFoundError(f"{path} (set {name.upper()}_BIN)")
        time.sleep(1)
    return str(path)


class Server:
    """A readerd process: ``start()`` on a free port, ``kill()`` (SIGKILL), ``start()``
    again on the same port and state dir, ``stop()``."""

    def __init__(self, data_root: Path, state_dir: Path, log: Path, args: Optional[list[str]] = None) -> None:
        self.data_root, self.state_dir, self.log = data_root, state_dir, log
        # Extra flags (TLS, tokens); without --auth-tokens, --allow-unauthenticated is added.
        self.args = list(args or [])
        self.port = 0
        self.process: Optional[subprocess.Popen] = None

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._start_once(deadline)
                return
            except RuntimeError:
                if self.port == 0 or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)  # the port may still be held after a kill

    def _start_once(self, deadline: float) -> None:
        command = [
            binary("readerd"),
            "--listen", f"127.0.0.1:{self.port}",
            "--data-root", str(self.data_root),
            "--state-dir", str(self.state_dir),
        ]  # fmt: skip
        command += self.args
        if "--auth-tokens" not in self.args:
            command.append("--allow-unauthenticated")
        log = open(self.log, "a")
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            preexec_fn=_die_with_parent if threading.current_thread() is threading.main_thread() else None,
        )
        log.close()
        assert process.stdout is not None
        while True:
            ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = process.stdout.readline() if ready else ""
            if not line:
                process.kill()
                process.wait()
                raise RuntimeError(f"readerd did not start (see {self.log}): {self.log.read_text()[-2000:]}")
            if line.startswith("listening on "):
                self.port = int(line.strip().rsplit(":", 1)[1])
                break
        # Keep draining stdout so the server never blocks on it.
        threading.Thread(target=process.stdout.read, daemon=True).start()
        self.process = process

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
            self.process = None

    def stop(self) -> None:
        self.kill()


def readerctl(server: Server, spec: Optional[Path], *args: str, check: bool = True) -> list[dict]:
    """``readerctl read --output jsonl`` against ``server``: its lines, parsed."""
    command = [binary("readerctl"), "read", "--addr", f"http://{server.addr}", "--output", "jsonl"]
    if spec is not None:
        command += ["--spec", str(spec)]
    result = subprocess.run(command + list(args), capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"readerctl failed ({result.returncode}): {result.stderr}\n{result.stdout[-2000:]}")
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def write_spec(directory: Path, name: str, spec: dict) -> Path:
    path = directory / f"{name}.json"
    path.write_text(json.dumps(spec))
    return path


# --- tensors in the golden JSON form (what readerctl prints) ----------------------------


def _float(value: float) -> Any:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == 0.0 and math.copysign(1.0, value) < 0:
        return "-0.0"
    return value


def dense_json(array: np.ndarray | readerd.Strings) -> dict:
    if isinstance(array, readerd.Strings):
        array = np.asarray(array)  # an object array of bytes
    flat = array.reshape(-1)
    if array.dtype == object:
        dtype, values = "string", [base64.b64encode(v).decode() for v in flat]
    elif array.dtype.kind == "f":
        dtype, values = array.dtype.name, [_float(float(v)) for v in flat]
    elif array.dtype.kind == "c":
        dtype, values = array.dtype.name, [[_float(float(v.real)), _float(float(v.imag))] for v in flat]
    elif array.dtype.kind == "b":
        dtype, values = "bool", [bool(v) for v in flat]
    else:
        dtype, values = array.dtype.name, [int(v) for v in flat]
    return {"kind": "dense", "dtype": dtype, "shape": list(array.shape), "values": values}


def tensor_json(tensor: readerd.Tensor) -> dict:
    if isinstance(tensor, readerd.Sparse):
        values = dense_json(tensor.values)
        return {
            "kind": "sparse",
            "dtype": values["dtype"],
            "indices": dense_json(tensor.indices),
            "values": values,
            "dense_shape": dense_json(tensor.dense_shape),
        }
    if isinstance(tensor, readerd.Ragged):
        flat = dense_json(tensor.flat_values)
        return {
            "kind": "ragged",
            "dtype": flat["dtype"],
            "ragged_rank": tensor.ragged_rank,
            "shape": list(tensor.shape),
            "flat_values": flat,
            "nested_row_splits": [dense_json(s) for s in tensor.nested_row_splits],
        }
    return dense_json(tensor)


def bfloat16_as_float32(value: Any) -> Any:
    """readerctl's JSON with dtype bfloat16 renamed float32 (the client widens bfloat16)."""
    if isinstance(value, dict):
        return {k: ("float32" if k == "dtype" and v == "bfloat16" else bfloat16_as_float32(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [bfloat16_as_float32(v) for v in value]
    return value


def read_all(client: readerd.Client, spec: Optional[dict] = None, **kwargs: Any) -> list[dict]:
    """Every element of a stream as ``{"seq", "keys", "features"}`` in the golden JSON form."""
    out = []
    with client.read(spec, **kwargs) as stream:
        for element in stream:
            features = {name: tensor_json(t) for name, t in element.items()}
            out.append({"seq": stream.seq, "keys": stream.keys, "features": features})
    return json.loads(json.dumps(out))
