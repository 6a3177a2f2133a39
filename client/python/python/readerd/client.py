"""The readerd client on the Arrow Flight plane: :class:`Client` and its :class:`Stream`.

``Client.read`` opens a ``DoGet`` whose ticket is the proto3 JSON of a
``readerd.v1.ReadRequest`` and returns a :class:`Stream`, an iterator of
``{feature: numpy array | Sparse | Ragged}`` dicts, one per element (a batch, or one
example when the spec does not batch). Checkpoints, acknowledgements and reader
administration are ``DoAction`` calls whose bodies are proto3 JSON too.

Reconnecting: when the connection drops (``UNAVAILABLE``, or a stream cut short before
its end-of-sequence marker), the stream reopens after a jittered exponential backoff
(:class:`RetryPolicy`). A private reader reopens from the latest checkpoint token the
stream saw (automatic or explicit; or from the start, or from ``resume=``, when it has
none) and the elements up to the last one handed out are skipped by their ``seq``: the
caller sees every element exactly once, in order. A shared reader is reattached by name;
see :class:`Stream` for what that guarantees.
"""

from __future__ import annotations

import json
import random
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

import pyarrow as pa
import pyarrow.flight as flight

from .errors import RETRYABLE, ReaderdError, from_arrow
from .tensors import Tensor, decode_batch

__all__ = ["Client", "Stream", "RetryPolicy"]

# int64 fields of the replies, rendered as JSON strings by proto3 JSON.
_INT64_FIELDS = frozenset(
    "recordsProduced workUnitsCompleted elementsProduced activeStreams recordsSkipped filesCutShort delivered "
    "acknowledged redelivered elementsInFlight elementsAwaitingRedelivery afterSeq upToSeq readersReleased".split()
)
_STATS_FIELDS = (
    "recordsProduced workUnitsCompleted elementsProduced activeStreams recordsSkipped filesCutShort "
    "elementsInFlight elementsAwaitingRedelivery".split()
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
    stats.update(reply)
    return stats


@dataclass(frozen=True)
class RetryPolicy:
    """How a stream reconnects: up to ``attempts`` consecutive failed attempts, waiting
    ``initial_delay * multiplier**(n-1)`` seconds (at most ``max_delay``) before attempt
    ``n``, each wait shortened by a random fraction up to ``jitter``."""

    attempts: int = 10
    initial_delay: float = 0.1
    max_delay: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.5

    def delay(self, attempt: int) -> float:
        base = min(self.max_delay, self.initial_delay * self.multiplier ** (attempt - 1))
        return base * (1.0 - self.jitter * random.random())


def _location(addr: str) -> str:
    if "://" in addr:
        scheme, rest = addr.split("://", 1)
        return addr if scheme in ("grpc", "grpc+tcp", "grpc+tls") else f"grpc://{rest}"
    return f"grpc://{addr}"


class Client:
    """A readerd server: ``Client("127.0.0.1:50051")`` (or ``"grpc://host:port"``).

    ``timeout`` (seconds) bounds each ``DoAction`` call; ``retry`` is the default
    :class:`RetryPolicy` of the streams it opens. TLS: ``tls_root_certs`` (the CA's PEM
    bytes) turns it on, ``cert_chain`` / ``private_key`` (PEM bytes) add a client
    certificate for mutual TLS. ``token`` is sent as ``authorization: Bearer <token>``.
    """

    def __init__(
        self,
        addr: str,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy = RetryPolicy(),
        tls_root_certs: Optional[bytes] = None,
        cert_chain: Optional[bytes] = None,
        private_key: Optional[bytes] = None,
        token: Optional[str] = None,
    ) -> None:
        self.location = _location(addr)
        if tls_root_certs is not None:
            self.location = "grpc+tls://" + self.location.split("://", 1)[1]
        self.timeout = timeout
        self.retry = retry
        self._tls = {"tls_root_certs": tls_root_certs, "cert_chain": cert_chain, "private_key": private_key}
        self.headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
        self._flight = self.connect()

    def connect(self) -> flight.FlightClient:
        """A new Flight connection (each stream reconnects on its own, fresh, channel)."""
        tls = {name: value for name, value in self._tls.items() if value is not None}
        return flight.FlightClient(self.location, **tls)

    def call_options(self, timeout: Optional[float] = None) -> flight.FlightCallOptions:
        """Options of every call: the token's header, and ``timeout`` when given."""
        return flight.FlightCallOptions(timeout=timeout, headers=self.headers)

    def close(self) -> None:
        self._flight.close()

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
        :attr:`Stream.last_token`). Raises :class:`ReaderdError` if the server refuses."""
        request: dict[str, Any] = {"reader": {"container": container, "sharedName": shared_name}}
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
        return Stream(self, request, retry or self.retry)

    # --- actions ---------------------------------------------------------------------

    def action(self, kind: str, body: dict, connection: Optional[flight.FlightClient] = None) -> dict:
        """Calls ``DoAction(kind, body)``: proto3 JSON in and out (int64 fields as ints)."""
        options = self.call_options(self.timeout)
        try:
            results = list((connection or self._flight).do_action(flight.Action(kind, json.dumps(body).encode()), options))
        except pa.ArrowException as exc:
            raise from_arrow(exc) from exc
        return _ints(json.loads(results[0].body.to_pybytes())) if results else {}

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


class _Cut(Exception):
    """The stream ended without its end-of-sequence marker: the connection was lost."""


_END = object()  # the end-of-sequence marker, as a pending item


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
    once. ``seq`` numbers this connection's elements. Reconnecting reattaches to the
    reader by name: acknowledged items are never delivered again, but the item handed out
    last before the connection dropped (not acknowledged yet) may be delivered again, to
    this stream or another (at-least-once for that one item). If the server itself
    restarted, the reader is recreated from the ``resume=`` token given to
    :meth:`Client.read` if any, else from the start of its spec.
    """

    def __init__(self, client: Client, request: dict, retry: RetryPolicy) -> None:
        self._client = client
        self._request = request
        self._retry = retry
        self.shared = bool(request["reader"]["sharedName"])
        self.seq: int = -1
        self.keys: list[str] = []
        self.last_token: Optional[str] = request.get("resumeToken")
        self.last_token_seq: Optional[int] = None
        self.stream_id: str = ""
        self.batched: bool = False
        self.reconnects = 0
        self._acked = -1
        self._connection: Optional[flight.FlightClient] = None
        self._reader: Optional[flight.FlightStreamReader] = None
        self._pending: deque[Any] = deque()  # an item read ahead (see _reopen_ahead), or _END
        self._opened = False
        self._ended = False
        self._closed = False
        self._with_retries(self._open)

    # --- the iterator ----------------------------------------------------------------

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> dict[str, Tensor]:
        if self._closed or self._ended:
            raise StopIteration
        if self.shared and self.seq > self._acked:
            self.acknowledge()
        item = self._pending.popleft() if self._pending else self._with_retries(self._read)
        if item is _END:
            # Kept until close(): a checkpoint or acknowledgement may still name the stream.
            self._ended = True
            raise StopIteration
        metadata, batch = item
        self.seq, self.keys = metadata["seq"], metadata["keys"]
        return decode_batch(batch, metadata.get("shapes", {}), self.batched)

    # --- checkpoints and acknowledgements ----------------------------------------------

    def checkpoint(self) -> str:
        """Commits a checkpoint after the last item handed out and returns its token (a
        stream resumed from it starts with the next item). Reconnects if needed."""
        if self.last_token is not None and self.last_token_seq == self.seq:
            return self.last_token
        for attempt in range(1, self._retry.attempts + 2):
            if self._reader is None:
                self._with_retries(self._reopen_ahead)
            try:
                reply = self._client.action(
                    "Checkpoint", {"streamId": self.stream_id, "afterSeq": self.seq}, self._connection
                )
                self.last_token, self.last_token_seq = reply["token"], self.seq
                return self.last_token
            except ReaderdError as err:
                if err.code not in RETRYABLE or attempt > self._retry.attempts:
                    raise
                self._drop_connection()
                time.sleep(self._retry.delay(attempt))
        raise AssertionError("unreachable")

    def acknowledge(self, up_to_seq: Optional[int] = None) -> None:
        """Tells a shared reader this stream's items up to ``up_to_seq`` (default: every
        item handed out) are consumed. A no-op for private readers."""
        up_to = self.seq if up_to_seq is None else up_to_seq
        if not self.shared or up_to <= self._acked or self._connection is None:
            return
        try:
            self._client.action("Acknowledge", {"streamId": self.stream_id, "upToSeq": up_to}, self._connection)
            self._acked = up_to
        except ReaderdError as err:
            if err.code not in RETRYABLE:
                raise
            # The connection is gone: its unacknowledged items go back to the reader.

    # --- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Acknowledges what was handed out (shared readers; best effort: a failure is
        not raised, the server then redelivers those items) and ends the stream."""
        if self._closed:
            return
        try:
            if self.shared and self._reader is not None:
                self.acknowledge()
        except ReaderdError:
            pass
        finally:
            self._closed = True
            self._drop_connection()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self._drop_connection()
        except Exception:
            pass

    # --- the connection ---------------------------------------------------------------

    def _ticket(self) -> flight.Ticket:
        request = dict(self._request)
        if not self.shared and self.last_token:
            # Continue after the latest checkpoint; the token knows its spec.
            request.pop("spec", None)
            request.pop("dataset", None)
            request["resumeToken"] = self.last_token
        return flight.Ticket(json.dumps(request).encode())

    def _open(self) -> None:
        """Opens the DoGet stream (its first message, the schema, comes with the first
        element or the end)."""
        self._drop_connection()
        self._connection = self._client.connect()
        self._reader = self._connection.do_get(self._ticket(), self._client.call_options())
        metadata = self._reader.schema.metadata or {}
        self.stream_id = metadata[b"readerd.stream_id"].decode()
        self.batched = metadata[b"readerd.batched"] == b"true"
        first_seq = int(metadata[b"readerd.first_seq"])
        if self.shared:
            self.seq = self._acked = first_seq - 1
        elif not self._opened:
            self.seq = first_seq - 1
            if self.last_token is not None:
                self.last_token_seq = self.seq
        self._opened = True

    def _read(self) -> Any:
        """The next new element as ``(metadata, batch)``, or ``_END``; takes in the
        checkpoints on the way and skips elements already handed out (after a reconnect)."""
        if self._reader is None:
            self._open()
            self.reconnects += 1
        assert self._reader is not None
        while True:
            try:
                chunk = self._reader.read_chunk()
            except StopIteration:
                raise _Cut("the stream ended before its end-of-sequence marker") from None
            metadata = json.loads(chunk.app_metadata.to_pybytes()) if chunk.app_metadata else {}
            if chunk.data is None:
                if "checkpoint" in metadata:
                    after = metadata["after_seq"]
                    if self.last_token_seq is None or after >= self.last_token_seq:
                        self.last_token, self.last_token_seq = metadata["checkpoint"], after
                elif metadata.get("end_of_sequence"):
                    return _END
                continue
            if not self.shared and metadata["seq"] <= self.seq:
                continue  # replayed after a reconnect: the caller has it
            return metadata, chunk.data

    def _reopen_ahead(self) -> None:
        """Reconnects now (for a checkpoint) and reads the next new element (or the end),
        kept for ``__next__``: the stream needs its first message to be known, and has
        then delivered everything handed out. An earlier read-ahead is dropped: it was
        never handed out, and the reader delivers it again."""
        self._pending.clear()
        self._pending.append(self._read())

    def _with_retries(self, step: Any) -> Any:
        """``step()``, reconnecting after connection failures as the policy allows."""
        failures = 0
        while True:
            try:
                return step()
            except (pa.ArrowException, ReaderdError, _Cut) as exc:
                err = ReaderdError("UNAVAILABLE", str(exc)) if isinstance(exc, _Cut) else from_arrow(exc)
                if err.code not in RETRYABLE:
                    self._closed = True
                    self._drop_connection()
                    raise err from exc
                self._drop_connection()
                failures += 1
                if failures > self._retry.attempts:
                    self._closed = True
                    raise ReaderdError(
                        "UNAVAILABLE",
                        f"gave up after {self._retry.attempts} reconnection attempts to {self._client.location}: "
                        f"{err.message}",
                    ) from exc
                time.sleep(self._retry.delay(failures))

    def _drop_connection(self) -> None:
        reader, connection = self._reader, self._connection
        self._reader = self._connection = None
        if reader is not None:
            try:
                reader.cancel()
            except Exception:
                pass
        if connection is not None:
            try:
                connection.close()
            except Exception:
                pass
