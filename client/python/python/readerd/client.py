"""The readerd client: :class:`Client` and its :class:`Stream`, over the native core
(``readerd._native``, the Rust client).

``Client.read`` opens a ``readerd.v1.DataService/Read`` stream and returns a
:class:`Stream`, an iterator of ``{feature: tensor}`` dicts, one per element (a batch, or
one example when the spec does not batch): numeric tensors are read-only numpy arrays
over the received buffers, strings :class:`~readerd.Strings`, and
:class:`~readerd.Sparse` / :class:`~readerd.Ragged`. The native core waits, receives and
decodes with the GIL released.

Addresses: ``Client("host:port")``, or several replicas of a cluster,
``Client("a:50051,b:50051")`` (or a list). A shared reader is then read from all of them
at once (a consumer session across replicas that survives a replica's death); a private
reader from the first that answers, moving to the next when it dies.

Reconnecting: when the connection drops, the stream reconnects after a jittered
exponential backoff (:class:`RetryPolicy`). A private reader reopens from the newest
checkpoint token the stream saw (or from the start, or ``resume=``) and skips what was
handed out already: the caller sees every element exactly once, in order. A shared reader
on one server is reattached by name; see :class:`Stream`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from . import _native
from .tensors import Tensor

__all__ = ["Client", "Stream", "RetryPolicy"]

# int64 fields of the replies, rendered as JSON strings by proto3 JSON.
_INT64_FIELDS = frozenset(
    "recordsProduced workUnitsCompleted elementsProduced activeStreams recordsSkipped filesCutShort delivered "
    "acknowledged redelivered elementsInFlight elementsAwaitingRedelivery afterSeq upToSeq readersReleased "
    "committedElements splitsLeased elementsDecoded detachments reattachments elementsShared position "
    "elementsReadAgain".split()
)
_STATS_FIELDS = (
    "recordsProduced workUnitsCompleted elementsProduced activeStreams recordsSkipped filesCutShort "
    "elementsInFlight elementsAwaitingRedelivery elementsDecoded".split()
)


def _ints(value: Any) -> Any:
    """``value`` with the int64 fields of proto3 JSON (strings) turned into ints."""
    if isinstance(value, dict):
        return {k: int(v) if k in _INT64_FIELDS and isinstance(v, str) else _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


def _stats(reply: dict) -> dict:
    """A ``ReaderStats`` reply with its omitted (zero) counters filled in."""
    stats = {name: 0 for name in _STATS_FIELDS}
    stats["consumers"] = []
    stats["jobs"] = []
    stats.update(reply)
    return stats


@dataclass(frozen=True)
class RetryPolicy:
    """How a stream reconnects: up to ``attempts`` consecutive failed attempts, waiting
    before attempt ``n`` ``initial_delay * 2**(n-1)`` seconds (at most ``max_delay``), the
    second half of each wait random so that the clients of one failed server spread out."""

    attempts: int = 10
    initial_delay: float = 0.1
    max_delay: float = 5.0


def _addrs(addr: Union[str, Sequence[str]]) -> list[str]:
    items = addr.split(",") if isinstance(addr, str) else list(addr)
    addrs = [a.strip() for a in items if a.strip()]
    if not addrs:
        raise ValueError("no server address")
    # Flight-style locations name the same port.
    return [a.replace("grpc+tls://", "https://").replace("grpc+tcp://", "http://").replace("grpc://", "http://") for a in addrs]


class Client:
    """A readerd server (or the replicas of a cluster): ``Client("127.0.0.1:50051")``,
    ``Client("a:50051,b:50051")`` or a list of addresses.

    ``timeout`` (seconds) bounds each call that is not a stream; ``retry`` is the default
    :class:`RetryPolicy` of the streams it opens. TLS: ``tls_root_certs`` (the CA's PEM
    bytes) turns it on, ``cert_chain`` / ``private_key`` (PEM bytes) add a client
    certificate for mutual TLS. ``token`` is sent as ``authorization: Bearer <token>``.
    """

    def __init__(
        self,
        addr: Union[str, Sequence[str]],
        *,
        timeout: float = 30.0,
        retry: RetryPolicy = RetryPolicy(),
        tls_root_certs: Optional[bytes] = None,
        cert_chain: Optional[bytes] = None,
        private_key: Optional[bytes] = None,
        token: Optional[str] = None,
    ) -> None:
        self.addrs = _addrs(addr)
        self.timeout = timeout
        self.retry = retry
        self._options = _native.Options(
            token=token, tls_root_certs=tls_root_certs, cert_chain=cert_chain, private_key=private_key
        )
        self._connection: Optional[_native.Connection] = None

    def close(self) -> None:
        self._connection = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- reading -------------------------------------------------------------------

    def read(
        self,
        spec: Optional[dict] = None,
        *,
        dataset: Optional[str] = None,
        container: str = "",
        shared_name: str = "",
        job: str = "",
        resume: Optional[str] = None,
        checkpoint_every: int = 0,
        checkpoint_interval_ms: int = 0,
        retry: Optional[RetryPolicy] = None,
    ) -> Stream:
        """Opens a stream of the reader ``(container, shared_name)`` (private when
        ``shared_name`` is empty) over ``spec`` (a dict: the proto3 JSON of a
        ``DatasetSpec``) or the server's named ``dataset``; ``resume`` continues right
        after a checkpoint token; ``checkpoint_every`` / ``checkpoint_interval_ms`` ask
        the server for automatic checkpoints of a private stream (see
        :attr:`Stream.last_token`). ``job`` names the consumer group of a shared reader
        this stream belongs to (empty: ``default``): every job receives every element,
        decoded once for all jobs, and a job's consumers split its elements. Raises
        :class:`ReaderdError` if the server refuses."""
        request: dict[str, Any] = {"reader": {"container": container, "sharedName": shared_name}}
        if job:
            request["job"] = job
        if spec is not None:
            request["spec"] = spec
        if dataset:
            request["dataset"] = dataset
        if resume:
            request["resumeToken"] = resume
        if checkpoint_every:
            request["checkpointEvery"] = checkpoint_every
        if checkpoint_interval_ms:
            request["checkpointIntervalMs"] = checkpoint_interval_ms
        policy = retry or self.retry
        native = _native.Stream(
            self.addrs,
            json.dumps(request),
            self._options,
            attempts=policy.attempts,
            initial_delay=policy.initial_delay,
            max_delay=policy.max_delay,
        )
        return Stream(native, shared=bool(shared_name), resume=resume)

    # --- calls ------------------------------------------------------------------------

    def action(self, kind: str, body: dict) -> dict:
        """Calls ``kind`` (a ``DataService`` method: ``GetReaderStats``, ``Checkpoint``...)
        with ``body``: proto3 JSON in and out (int64 fields as ints), on the first server."""
        if self._connection is None:
            self._connection = _native.Connection(self.addrs[0], self._options, timeout=self.timeout)
        return _ints(json.loads(self._connection.call(kind, json.dumps(body))))

    def list_readers(self, container: str = "") -> list[dict]:
        """The readers of ``container``: ``ReaderInfo`` dicts (reader, fingerprint, stats, spec)."""
        return self.action("ListReaders", {"container": container}).get("readers", [])

    def stats(self, container: str = "", shared_name: str = "") -> dict:
        """A reader's ``ReaderStats`` (``recordsProduced``, ``activeStreams``, ``consumers``...)."""
        return _stats(self.action("GetReaderStats", {"reader": {"container": container, "sharedName": shared_name}}))

    def reset(self, container: str = "", shared_name: str = "") -> dict:
        """Rewinds a reader to its first record; returns its (zeroed) stats."""
        return _stats(self.action("ResetReader", {"reader": {"container": container, "sharedName": shared_name}}))

    def delete(self, container: str = "", shared_name: str = "") -> None:
        """Releases a reader; its open streams end with ``ABORTED``."""
        self.action("DeleteReader", {"reader": {"container": container, "sharedName": shared_name}})

    def list_datasets(self) -> dict[str, dict]:
        """The datasets the server's configuration names: ``{name: spec}``."""
        return self.action("ListDatasets", {}).get("datasets", {})

    def describe(self, spec: Optional[dict] = None, dataset: str = "") -> dict:
        """What a spec's (or named dataset's) elements hold, before reading:
        ``{"features": [{"name", "kind", "dtype", "shape"}...], "batchSize", "dropRemainder",
        "elementCount"}``, each feature's shape for one record (-1 where records differ),
        after the decoder and the spec's transforms; ``elementCount`` as tf.data's
        cardinality: the elements the spec gives where its files say so before reading
        (Parquet / Arrow footers, fixed-length files), -1 endless, -2 unknown."""
        body: dict = {"dataset": dataset} if dataset else {"spec": spec}
        described = self.action("DescribeSpec", body)
        for feature in described.setdefault("features", []):
            feature["shape"] = [int(d) for d in feature.get("shape", [])]
            feature.setdefault("kind", "DENSE")
        described["batchSize"] = int(described.get("batchSize", 0))
        described["dropRemainder"] = bool(described.get("dropRemainder", False))
        described["elementCount"] = int(described.get("elementCount", 0))
        return described

    def lookup_or_create(
        self, spec: Optional[dict] = None, *, container: str = "", shared_name: str = "", dataset: str = ""
    ) -> dict:
        """The ``ReaderInfo`` of a shared reader, created from ``spec`` / ``dataset`` if new."""
        body: dict[str, Any] = {"reader": {"container": container, "sharedName": shared_name}}
        if spec is not None:
            body["spec"] = spec
        if dataset:
            body["dataset"] = dataset
        return self.action("LookupOrCreateReader", body)

    def checkpoint_reader(self, container: str, shared_name: str, job: str = "") -> str:
        """A checkpoint of a shared reader as a whole (on replicas: its whole job), or of
        its consumer group ``job``; its token resumes it with ``read(resume=token,
        container=..., shared_name=..., job=...)``."""
        body: dict[str, Any] = {"afterSeq": -1, "reader": {"container": container, "sharedName": shared_name}}
        if job:
            body["job"] = job
        return self.action("Checkpoint", body)["token"]


class Stream(Iterator[dict[str, Tensor]]):
    """One reader stream: iterate it for ``{feature: tensor}`` dicts.

    After each item, :attr:`seq` and :attr:`keys` describe it. :meth:`checkpoint` commits a
    checkpoint covering every item handed out so far and returns its token;
    :attr:`last_token` is the latest token this stream saw (automatic or explicit) and
    :attr:`last_token_seq` the ``seq`` it covers up to.

    Private reader (``shared_name=""``): ``seq`` numbers the elements from 0 (from
    ``after_seq + 1`` after ``resume=``); reconnecting is exact (no element lost, none
    repeated).

    Shared reader: several streams share the reader's elements. The stream acknowledges
    an item when the next one is asked for (and on :meth:`close`), so the server neither
    redelivers it nor holds its end-of-sequence for it; :meth:`acknowledge` does it at
    once. On one server, ``seq`` numbers this connection's elements, and reconnecting
    reattaches to the reader by name: acknowledged items are never delivered again, but
    the item handed out last before the connection dropped may be delivered again (to
    this stream or another). If the server itself restarted, the reader is recreated from
    the ``resume=`` token given to :meth:`Client.read` if any, else from the start of its
    spec. On several replicas, ``seq`` numbers this session's elements, a replica's death
    loses and repeats nothing this session acknowledged, and :meth:`checkpoint` is a
    checkpoint of the whole job.

    Iterating a stream after :meth:`close` (or after it raised an error) raises
    ``ValueError("stream is closed")``, as a closed file does; ``StopIteration`` means
    only the end of the data.

    Ctrl-C interrupts a wait for the server (``KeyboardInterrupt`` within a tenth of a
    second); the stream stays open, and the next ``next()`` waits for the same element.
    A server that stops answering altogether (stopped, frozen, cut off: no answer to the
    HTTP/2 pings sent every 5 s, for 10 s) counts as lost, on a single address too: the
    stream reconnects as its :class:`RetryPolicy` says and resumes where it was.
    """

    def __init__(self, native: _native.Stream, *, shared: bool, resume: Optional[str]) -> None:
        self._native = native
        self.shared = shared
        self.seq: int = native.seq
        self.keys: list[str] = []
        self._closed = False
        self._closed_why = ""
        self._ended = False
        self._resume = resume

    # --- the iterator ----------------------------------------------------------------

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> dict[str, Tensor]:
        if self._closed:
            raise ValueError(f"stream is closed{self._closed_why}")
        if self._ended:
            raise StopIteration
        try:
            item = self._native.next()
        except Exception as err:
            self._closed = True
            self._closed_why = f" (it failed: {err})"
            raise
        if item is None:
            self._ended = True
            raise StopIteration
        self.seq, self.keys, features = item
        return features

    # --- checkpoints and acknowledgements ----------------------------------------------

    @property
    def last_token(self) -> Optional[str]:
        """The newest checkpoint token this stream saw (``resume=`` until the first)."""
        newest = self._native.last_checkpoint
        return newest[0] if newest is not None else self._resume

    @property
    def last_token_seq(self) -> Optional[int]:
        """The ``seq`` of the last element :attr:`last_token` covers."""
        newest = self._native.last_checkpoint
        return newest[1] if newest is not None else None

    @property
    def stream_id(self) -> str:
        return self._native.stream_id

    @property
    def reconnects(self) -> int:
        """How many times the stream connected again after losing its server."""
        return self._native.reconnects

    def checkpoint(self) -> str:
        """Commits a checkpoint after the last item handed out and returns its token (a
        stream resumed from it starts with the next item). Reconnects if needed."""
        token, _ = self._native.checkpoint()
        return token

    def acknowledge(self) -> None:
        """Tells a shared reader this stream's items handed out so far are consumed. A
        no-op for private readers."""
        self._native.acknowledge()

    # --- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Acknowledges what was handed out (shared readers; best effort: a failure is
        not raised, the server then redelivers those items) and ends the stream."""
        if not self._closed:
            self._closed = True
            self._native.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
