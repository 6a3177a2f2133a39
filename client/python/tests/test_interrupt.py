"""What a user at the keyboard meets: Ctrl-C while ``next()`` waits on a server that stopped
answering, ``next()`` on a closed stream, an address that cannot parse."""

from __future__ import annotations

import contextlib
import json
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import readerd
from helpers import Server
from test_stream import padded, padded_spec

# The child: opens an endless stream, reads until the server is stopped ("go"), reports
# when next() has waited a second ("blocked"), and reports the KeyboardInterrupt; once the
# server runs again ("resumed"), the same stream goes on.
CHILD = textwrap.dedent(
    """
    import json, signal, sys, threading, time
    import readerd

    # A process started in the background by a shell without job control inherits SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler: install it, as an
    # interactive Python has it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stream = readerd.Client(sys.argv[1]).read(json.loads(sys.argv[2]))
    print("opened", flush=True)
    sys.stdin.readline()  # "go": the server is stopped
    last = [time.monotonic()]

    def watch():
        while True:
            time.sleep(0.1)
            if time.monotonic() - last[0] > 1.0:
                print("blocked", flush=True)
                return

    threading.Thread(target=watch, daemon=True).start()
    try:
        while True:
            next(stream)
            last[0] = time.monotonic()
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    sys.stdin.readline()  # "resumed": the server runs again
    next(stream)
    print(f"next after resume {stream.seq}", flush=True)
    stream.close()
    """
)


def read_line(process: subprocess.Popen, timeout: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    return process.stdout.readline().strip() if ready else ""


@contextlib.contextmanager
def child_reading(server: Server, script: str, spec: dict):
    """A Python process running `script` on `server`'s address and `spec` (as JSON), its
    stdin and stdout pipes of text; on leaving, the server runs again (a SIGCONT, for one
    a test stopped) and the child has ended."""
    assert server.process is not None
    child = subprocess.Popen(
        [sys.executable, "-c", script, server.addr, json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        yield child
    finally:
        server.process.send_signal(signal.SIGCONT)
        if child.poll() is None:
            child.kill()
        child.wait()


def tell(child: subprocess.Popen, line: str) -> None:
    assert child.stdin is not None
    child.stdin.write(line + "\n")
    child.stdin.flush()


def test_ctrl_c_interrupts_next_while_the_server_is_stopped(server: Server, data_root: Path) -> None:
    padded(data_root, 300)
    with child_reading(server, CHILD, padded_spec(batchSize=2, numEpochs=-1)) as child:
        assert read_line(child, 30) == "opened"
        server.process.send_signal(signal.SIGSTOP)
        tell(child, "go")
        # What the client had buffered is read first; then next() waits.
        assert read_line(child, 60) == "blocked"
        child.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert read_line(child, 5) == "interrupted", "Ctrl-C did not interrupt next()"
        assert time.monotonic() - started < 3
        server.process.send_signal(signal.SIGCONT)
        tell(child, "resumed")
        assert read_line(child, 30).startswith("next after resume "), "the stream did not go on"
        assert child.wait(timeout=30) == 0


def test_next_on_a_closed_stream_is_an_error_not_the_end(server: Server, data_root: Path) -> None:
    padded(data_root, 10)
    stream = readerd.Client(server.addr).read(padded_spec(numEpochs=1))
    next(stream)
    stream.close()
    with pytest.raises(ValueError, match="stream is closed"):
        next(stream)
    # The end of the data is still StopIteration.
    stream = readerd.Client(server.addr).read(padded_spec(numEpochs=1))
    assert len(list(stream)) == 10
    with pytest.raises(StopIteration):
        next(stream)


def test_an_address_that_cannot_parse_is_refused_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(readerd.ReaderdError) as failure:
        readerd.Client("not a host:::").read(padded_spec())
    assert time.monotonic() - started < 2, "the address was retried"
    assert failure.value.code == "INVALID_ARGUMENT"
    assert "not a host:::" in failure.value.message


# The child: reads 10 elements (automatic checkpoints every 100), waits for the server to
# be stopped ("go"), then calls next() until it raises, and says what it raised and when.
SILENT_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import readerd

    retry = readerd.RetryPolicy(attempts=4, initial_delay=0.1, max_delay=1.0)
    stream = readerd.Client(sys.argv[1]).read(json.loads(sys.argv[2]), checkpoint_every=100, retry=retry)
    for _ in range(10):
        next(stream)
    print("read 10", flush=True)
    sys.stdin.readline()  # "go": the server is stopped
    started = time.monotonic()
    try:
        while True:
            next(stream)
    except readerd.ReaderdError as err:
        waited = time.monotonic() - started
        print(json.dumps({"code": err.code, "message": err.message, "waited": waited}), flush=True)
    """
)


def test_next_on_a_silent_server_raises_unavailable_once_its_retries_are_spent(server: Server, data_root: Path) -> None:
    """A server stopped with SIGSTOP still has its connections accepted (by its kernel):
    the stream finds it silent by its pings (about 15 s), and each reconnection attempt
    by a health check answered within 2 s, so next() raises UNAVAILABLE after its retries
    instead of waiting on the frozen server for good."""
    padded(data_root, 300)
    with child_reading(server, SILENT_CHILD, padded_spec(batchSize=2, numEpochs=-1)) as child:
        assert read_line(child, 30) == "read 10"
        server.process.send_signal(signal.SIGSTOP)
        tell(child, "go")
        line = read_line(child, 120)
        assert line, "next() was still blocked on the stopped server after 120 s"
        raised = json.loads(line)
        assert raised["code"] == "UNAVAILABLE", raised
        assert raised["waited"] < 60, f"next() raised only after {raised['waited']:.0f} s: {raised}"
