"""Stream semantics against a real server: resume from tokens, reconnection across a
server crash (SIGKILL and restart), giving up, error codes, shared readers."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import pyarrow as pa
from pyarrow import flight as pa_flight

import readerd
from helpers import Server, readerctl, write_spec
from readerd.tfrecord import common_prefix, example, write_tfrecord


def labelled(root: Path, n: int, name: str = "labels.tfrecord") -> list[int]:
    """``n`` Examples ``{label: i, x: [i, -i]}``; returns their offsets."""
    records = [example({"label": i, "x": [float(i), -float(i)]}) for i in range(n)]
    return write_tfrecord(root / name, records)


def spec(name: str = "labels.tfrecord", **pipeline: object) -> dict:
    return {
        "source": {"files": [name], "format": "TFRECORD"},
        "decoder": {"example": {"features": {
            "label": {"fixedLen": {"dtype": "INT64", "shape": []}},
            "x": {"fixedLen": {"dtype": "FLOAT32", "shape": [2]}},
        }}},
        "pipeline": pipeline,
    }  # fmt: skip


def padded(root: Path, n: int) -> list[str]:
    """``n`` Examples with an 8 KB ``pad`` (so a stream cannot hold them all in flight);
    returns their keys."""
    records = [example({"pad": b"p" * 8192, "label": 1_000_000 + i, "x": [float(i), 0.0]}) for i in range(n)]
    offsets = write_tfrecord(root / "padded.tfrecord", records, common_prefix(records[0], records[1]))
    return [f"padded.tfrecord:{o}" for o in offsets]


def padded_spec(**pipeline: object) -> dict:
    """The spec of :func:`padded`'s file, ``pad`` included."""
    s = spec("padded.tfrecord", **pipeline)
    s["decoder"]["example"]["features"]["pad"] = {"fixedLen": {"dtype": "STRING", "shape": []}}
    return s


PADDED = padded_spec(numEpochs=1)


SHUFFLED = {"batchSize": 3, "numEpochs": 2, "seed": 3, "shuffle": {"bufferSize": 8}, "shuffleFiles": True}
FAST_RETRY = readerd.RetryPolicy(attempts=40, initial_delay=0.05, max_delay=0.5)


def run(stream: readerd.Stream, limit: int | None = None) -> list[tuple[int, list[str]]]:
    """``(seq, keys)`` of the stream's items (at most ``limit``)."""
    out = []
    for _ in stream:
        out.append((stream.seq, stream.keys))
        if limit is not None and len(out) == limit:
            break
    return out


# --- resume ---------------------------------------------------------------------------


def test_resume_from_explicit_checkpoints_continues_the_exact_sequence(server: Server, data_root: Path) -> None:
    padded(data_root, 600)
    client, s = readerd.Client(server.addr), padded_spec(**SHUFFLED)
    full = run(client.read(s))
    assert [seq for seq, _ in full] == list(range(len(full))) and len(full) == 400
    for cut in (0, 1, 5, 13):
        with client.read(s) as stream:
            head = run(stream, cut) if cut else []
            token = stream.checkpoint()
            assert stream.last_token == token and stream.last_token_seq == cut - 1
        tail = run(client.read(resume=token))
        assert head + tail == full, cut
        # A token is an immutable snapshot: the same tail again, also through readerctl.
        assert run(client.read(resume=token)) == tail
        lines = readerctl(server, None, "--resume", token)
        assert [(line["seq"], line["keys"]) for line in lines if "keys" in line] == tail


def test_checkpoint_near_the_end_of_a_stream(server: Server, data_root: Path) -> None:
    labelled(data_root, 40)
    client, s = readerd.Client(server.addr), spec(**SHUFFLED)
    full = run(client.read(s))
    with client.read(s) as stream:
        head = run(stream, len(full) - 1)
        token = stream.checkpoint()
    assert head + run(client.read(resume=token)) == full


def test_automatic_checkpoints_resume_right_after_their_element(server: Server, data_root: Path) -> None:
    labelled(data_root, 200)
    client, s = readerd.Client(server.addr), spec(batchSize=2, numEpochs=1)
    full = run(client.read(s))
    tokens = {}
    with client.read(s, checkpoint_every=10) as stream:
        for _ in stream:
            if stream.last_token is not None:
                assert stream.last_token_seq <= stream.seq
                tokens[stream.last_token_seq] = stream.last_token
    assert len(tokens) >= 3, tokens
    for after_seq, token in tokens.items():
        assert run(client.read(resume=token)) == full[after_seq + 1 :]


# --- reconnection -----------------------------------------------------------------------


@pytest.mark.parametrize("checkpoint_every", [10, 0])
def test_reconnects_after_a_server_crash_without_loss_or_duplicates(
    server: Server, data_root: Path, checkpoint_every: int
) -> None:
    padded(data_root, 300)
    client, s = readerd.Client(server.addr), padded_spec(batchSize=2, seed=11, shuffle={"bufferSize": 32})
    full = run(client.read(s))
    assert len(full) == 150
    got = []
    restarted = threading.Timer(0.5, server.start)
    with client.read(s, checkpoint_every=checkpoint_every, retry=FAST_RETRY) as stream:
        for _ in stream:
            got.append((stream.seq, stream.keys))
            if len(got) == 37:
                token_at_crash = stream.last_token_seq
                server.kill()
                restarted.start()
    restarted.join()
    assert got == full
    assert stream.reconnects >= 1
    if checkpoint_every:
        assert token_at_crash is not None  # the resumed stream started from a token
    # The checkpoint store survived the crash: the last token still resumes.
    if stream.last_token is not None:
        assert run(client.read(resume=stream.last_token)) == full[stream.last_token_seq + 1 :]


def test_checkpoint_after_a_crash_reconnects_and_covers_what_was_handed_out(server: Server, data_root: Path) -> None:
    padded(data_root, 300)
    client, s = readerd.Client(server.addr), padded_spec(batchSize=2)
    full = run(client.read(s))
    with client.read(s, retry=FAST_RETRY) as stream:
        head = run(stream, 7)
        server.kill()
        threading.Timer(0.3, server.start).start()
        token = stream.checkpoint()
        rest = run(stream)
    assert head + rest == full
    assert run(client.read(resume=token)) == full[7:]


def test_gives_up_when_the_server_stays_down(server: Server, data_root: Path) -> None:
    padded(data_root, 300)
    retry = readerd.RetryPolicy(attempts=3, initial_delay=0.05, max_delay=0.2)
    client = readerd.Client(server.addr, retry=retry)
    stream = client.read(padded_spec(batchSize=2), checkpoint_every=5)
    next(stream)
    server.kill()
    started = time.monotonic()
    with pytest.raises(readerd.ReaderdError) as failure:
        for _ in stream:
            pass
    assert failure.value.code == "UNAVAILABLE"
    assert "gave up after 3 reconnection attempts" in failure.value.message
    assert time.monotonic() - started < 10
    with pytest.raises(readerd.ReaderdError) as failure:
        client.read(spec())  # opening retries too, then gives up
    assert failure.value.code == "UNAVAILABLE"


# --- errors -------------------------------------------------------------------------------


def test_corrupt_record_is_data_loss_with_its_offset(server: Server, data_root: Path, tmp_path: Path) -> None:
    offsets = labelled(data_root, 10, "bad.tfrecord")
    data = bytearray((data_root / "bad.tfrecord").read_bytes())
    data[offsets[4] + 8] ^= 0xFF  # the length's CRC of record 4
    (data_root / "bad.tfrecord").write_bytes(bytes(data))
    s = spec("bad.tfrecord")
    stream = readerd.Client(server.addr).read(s)
    got = []
    with pytest.raises(readerd.ReaderdError) as failure:
        for element in stream:
            got.append(int(element["label"]))
    assert got == [0, 1, 2, 3]
    assert failure.value.code == "DATA_LOSS"
    assert f"corrupted record at {offsets[4]}" in failure.value.message
    assert "bad.tfrecord" in failure.value.message
    lines = readerctl(server, write_spec(tmp_path, "bad", s), check=False)
    assert lines[-1]["error"] == {"code": failure.value.code, "message": failure.value.message}


def test_bad_requests_map_to_their_codes(server: Server, data_root: Path) -> None:
    labelled(data_root, 5)
    client = readerd.Client(server.addr)
    cases = [
        (spec(numEpochs=-5), {}, "INVALID_ARGUMENT", "numEpochs"),
        ({"source": {"files": ["labels.tfrecord"], "format": "NOPE"}}, {}, "INVALID_ARGUMENT", "NOPE"),
        (spec("missing-*.tfrecord"), {}, "NOT_FOUND", "missing-*.tfrecord"),
        (spec("../outside.tfrecord"), {}, "PERMISSION_DENIED", ""),
        (None, {"resume": "rd1.forged"}, "INVALID_ARGUMENT", "token"),
    ]
    for request, options, code, phrase in cases:
        with pytest.raises(readerd.ReaderdError) as failure:
            client.read(request, **options)
        assert failure.value.code == code, failure.value
        assert phrase in failure.value.message
    # Splitting batches into parts is readerd.v1's; a Flight ticket asking for it is refused.
    ticket = pa_flight.Ticket(json.dumps({"spec": spec(), "maxMessageBytes": 1 << 20}).encode())
    with pytest.raises(pa.ArrowInvalid) as refused:  # INVALID_ARGUMENT, as pyarrow raises it
        pa_flight.connect(f"grpc://{server.addr}").do_get(ticket).read_all()
    assert "maxMessageBytes" in str(refused.value)
    # ListActions names the DoAction calls; the Flight calls readerd does not serve (it
    # declares only DoGet, DoAction and ListActions) answer UNIMPLEMENTED.
    flight_client = pa_flight.connect(f"grpc://{server.addr}")
    assert "Checkpoint" in [action.type for action in flight_client.list_actions()]
    with pytest.raises(pa.ArrowNotImplementedError):
        flight_client.get_flight_info(pa_flight.FlightDescriptor.for_path("labels.tfrecord"))
    # An existing shared reader with another spec.
    client.read(spec(), container="c", shared_name="r").close()
    with pytest.raises(readerd.ReaderdError) as failure:
        client.read(spec(batchSize=2), container="c", shared_name="r")
    assert failure.value.code == "FAILED_PRECONDITION"
    with pytest.raises(readerd.ReaderdError) as failure:
        client.action("Checkpoint", {"streamId": "no-such-stream", "afterSeq": 1})
    assert failure.value.code == "NOT_FOUND"


# --- shared readers --------------------------------------------------------------------------


def consume_shared(client: readerd.Client, s: dict, limit: int | None, start: threading.Barrier | None = None):
    """The keys one consumer of the shared reader ``team/train`` receives (at most ``limit``
    elements), acknowledging as it goes and when it closes."""
    keys: list[str] = []
    if start is not None:
        start.wait()
    with client.read(s, container="team", shared_name="train") as stream:
        for _ in stream:
            keys.extend(stream.keys)
            time.sleep(0.003)
            if limit is not None and len(keys) == limit:
                break
    return keys


def in_threads(*calls, timeout: float = 60) -> list:
    """Runs the calls in parallel (daemon) threads; their results, or the first error."""
    results: list = [None] * len(calls)
    errors: list = []

    def run_one(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run_one, args=(i,), daemon=True) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a consumer is stuck"
    if errors:
        raise errors[0]
    return results


def settled(client: readerd.Client, container: str, shared_name: str, timeout: float = 5) -> dict:
    """The reader's stats once no stream is attached (or after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = client.stats(container, shared_name)
        if stats["activeStreams"] == 0 or time.monotonic() > deadline:
            return stats
        time.sleep(0.05)


def test_consumers_of_a_shared_reader_never_receive_the_same_element(server: Server, data_root: Path) -> None:
    """Two consumers at once, then a third after they left: no element twice, and what the
    first two had received without handing it out goes to the third."""
    everything = padded(data_root, 1500)
    client = readerd.Client(server.addr)
    start = threading.Barrier(2)
    first, second = in_threads(*[lambda: consume_shared(client, PADDED, 40, start)] * 2)
    assert len(first) == len(second) == 40
    stats = settled(client, "team", "train")
    assert stats["activeStreams"] == 0 and stats["elementsAwaitingRedelivery"] > 0
    (third,) = in_threads(lambda: consume_shared(client, PADDED, 100))
    received = first + second + third
    assert len(set(received)) == len(received) == 180 and set(received) <= set(everything)
    stats = settled(client, "team", "train")
    assert stats["activeStreams"] == 0 and stats["elementsInFlight"] == 0, stats


def test_two_consumers_of_a_shared_reader_get_each_element_once(server: Server, data_root: Path) -> None:
    everything = padded(data_root, 300)
    client = readerd.Client(server.addr)
    start = threading.Barrier(2)
    first, second = in_threads(*[lambda: consume_shared(client, PADDED, None, start)] * 2, timeout=30)
    assert first and second
    assert sorted(first + second) == sorted(everything)
    stats = settled(client, "team", "train")
    assert stats["elementsProduced"] == 300 and stats["elementsAwaitingRedelivery"] == 0


def test_two_jobs_each_get_every_element_and_a_job_of_two_consumers_splits_them(server: Server, data_root: Path) -> None:
    """A sweep: job ``one`` is a single trainer, job ``two`` two consumers; each job gets
    every element once, decoded once for both, and a job's checkpoint resumes that job."""
    everything = padded(data_root, 200)
    client = readerd.Client(server.addr)

    def consume(job: str, start: threading.Barrier) -> list[str]:
        keys: list[str] = []
        start.wait()
        with client.read(PADDED, container="team", shared_name="train", job=job) as stream:
            for _ in stream:
                keys.extend(stream.keys)
        return keys

    start = threading.Barrier(3)
    one, two_a, two_b = in_threads(lambda: consume("one", start), *[lambda: consume("two", start)] * 2)
    assert one == everything, "a job of one consumer gets the reader's order"
    assert sorted(two_a + two_b) == sorted(everything) and len(two_a + two_b) == len(everything)
    stats = settled(client, "team", "train")
    assert {job["name"] for job in stats["jobs"]} == {"one", "two"}
    assert stats["elementsDecoded"] < 2 * len(everything), stats
    token = client.checkpoint_reader("team", "train", job="one")
    with client.read(container="team", shared_name="train", job="one", resume=token) as stream:
        assert list(stream) == [], "job one had everything acknowledged"
    with pytest.raises(readerd.ReaderdError, match="resumes job"):
        with client.read(container="team", shared_name="train", job="two", resume=token) as stream:
            next(stream)


def test_admin_actions(server: Server, data_root: Path) -> None:
    padded(data_root, 200)
    client, s = readerd.Client(server.addr), {**PADDED, "pipeline": {"batchSize": 5}}
    info = client.lookup_or_create(s, container="adm", shared_name="r")
    assert info["created"] is True and info["reader"] == {"container": "adm", "sharedName": "r"}
    with client.read(s, container="adm", shared_name="r") as stream:
        next(stream)
        next(stream)
        stream.acknowledge()
        consumer = client.stats("adm", "r")["consumers"][0]
        assert consumer["streamId"] == stream.stream_id and consumer["acknowledged"] == 2
    assert [r["reader"]["sharedName"] for r in client.list_readers("adm")] == ["r"]
    assert client.stats("adm", "r")["recordsProduced"] >= 10
    assert client.reset("adm", "r")["recordsProduced"] == 0
    client.delete("adm", "r")
    assert client.list_readers("adm") == []
    assert client.list_datasets() == {}


def test_the_last_elements_of_a_shared_stream_can_be_acknowledged(server: Server, data_root: Path) -> None:
    labelled(data_root, 10)
    client = readerd.Client(server.addr)
    with client.read(spec(), container="c", shared_name="done") as stream:
        assert len(run(stream)) == 10
        stream.acknowledge()
    stats = settled(client, "c", "done")
    assert stats["activeStreams"] == 0 and stats["elementsAwaitingRedelivery"] == 0


def test_a_slow_consumer_keeps_what_it_was_sent_after_the_end(server: Server, data_root: Path) -> None:
    """The server sends a consumer elements ahead; after the last one it waits for the
    consumer's acknowledgements as long as the consumer is connected. A consumer that
    takes longer than the stream's 10 s of lingering after the end (a DataLoader worker
    waiting for its turn, a slow step) still owns what it was sent: a second consumer
    gets none of it, and no element is delivered twice."""
    labelled(data_root, 12)
    client = readerd.Client(server.addr)
    taken = threading.Event()

    def slow() -> list[str]:
        keys: list[str] = []
        with client.read(spec(), container="c", shared_name="slow") as stream:
            for _ in stream:
                keys.extend(stream.keys)
                if len(keys) == 1:
                    taken.set()
                    time.sleep(11)  # everything else was sent here already
        return keys

    def late() -> list[str]:
        taken.wait()
        with client.read(spec(), container="c", shared_name="slow") as stream:
            return [key for _ in stream for key in stream.keys]

    first, second = in_threads(slow, late, timeout=40)
    assert sorted(first + second) == sorted(set(first + second)) and len(first + second) == 12


def test_a_wrong_port_is_named_within_seconds() -> None:
    """Nothing listening: the first read says so, naming the address, in a few seconds
    (not after a reconnecting stream's whole patience)."""
    import socket
    import time

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(readerd.ReaderdError) as failure:
        next(iter(readerd.Client(f"127.0.0.1:{port}").read({"source": {"files": ["x"], "format": "TFRECORD"}})))
    assert time.monotonic() - started < 10
    assert failure.value.code == "UNAVAILABLE"
    assert f"127.0.0.1:{port}" in str(failure.value) and "is readerd running there" in str(failure.value)


def test_a_spec_field_got_wrong_is_named_by_its_path(server) -> None:
    with pytest.raises(readerd.ReaderdError) as failure:
        next(iter(readerd.Client(server.addr).read({"source": {"filez": ["x"], "format": "TFRECORD"}})))
    assert failure.value.code == "INVALID_ARGUMENT"
    assert "spec.source.filez: unknown field `filez`" in str(failure.value)
