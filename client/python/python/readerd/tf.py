"""``readerd.tf``: a readerd stream as a ``tf.data.Dataset``, for tf.data (service) users
moving over, resumable in a ``tf.train.Checkpoint`` or by Keras's ``BackupAndRestore``.

    import readerd.tf

    ds = readerd.tf.dataset("127.0.0.1:50051", spec)        # any Client.read option too
    for batch in ds:                                         # {"label": tf.Tensor, ...}
        train_step(batch)

    reader = readerd.tf.Reader("127.0.0.1:50051", spec)      # resumable
    model.fit(reader.dataset().map(to_xy), epochs=3,
              callbacks=[readerd.tf.BackupAndRestore("/ckpt/backup", reader)])

No ``element_spec=`` is needed for any spec. Where the spec alone says what its elements
hold, TensorFlow itself computes it: the spec's decoder becomes ``tf.io`` feature specs
(``FixedLenFeature``, ``VarLenFeature``, ``SparseFeature``, ``RaggedFeature``...) and the
element spec is what ``tf.io.parse_example`` (or ``parse_single_example``,
``parse_sequence_example``, ``decode_csv``, ``decode_raw``) gives for a batch of the spec's
size, so a model built on a tf.data pipeline's ``element_spec`` takes readerd's dataset
unchanged. What only the files say (CSV columns named by a header line, Parquet and Arrow
columns) and what ``transforms`` write (static shapes: a 224x224 crop is
``[B, 224, 224, 3]``) come from the server (``DescribeSpec``). The batch dimension is
``None`` unless the spec drops remainders.

Imported on demand (``import readerd.tf``); it needs TensorFlow, which the readerd package
does not depend on. The elements are read by the native client (``readerd.Client``), then
handed to TensorFlow (which copies them into its tensors).
"""

from __future__ import annotations

import collections
import json
import os
import threading
from typing import Any, Optional, Union

try:
    import tensorflow as tf
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("readerd.tf needs TensorFlow: pip install tensorflow-cpu") from exc

import numpy as np

from .client import Client
from .tensors import Ragged, Sparse, Strings

__all__ = ["BackupAndRestore", "Reader", "dataset", "element_spec_of"]


def dataset(
    addr: Union[str, list[str]],
    spec: Optional[dict] = None,
    *,
    element_spec: Optional[dict] = None,
    client_options: Optional[dict] = None,
    **read_options: Any,
) -> tf.data.Dataset:
    """The stream ``Client(addr, **client_options).read(spec, **read_options)`` as a
    ``tf.data.Dataset`` of ``{feature: tf.Tensor | tf.SparseTensor | tf.RaggedTensor}``.
    Each iteration of the dataset opens a new stream (with ``resume=``, from that token).
    To save and restore where a training loop is, use :class:`Reader`."""
    count = UNKNOWN
    if element_spec is None:
        element_spec, count = _from_server(addr, spec, read_options.get("dataset"), client_options)
    signature = dict(element_spec)

    def elements():
        with Client(addr, **(client_options or {})).read(spec, **read_options) as stream:
            for element in stream:
                yield {name: _value(element[name], signature[name]) for name in signature}

    ds = tf.data.Dataset.from_generator(elements, output_signature=signature)
    if read_options.get("resume") or read_options.get("shared_name"):
        return ds  # from a token, or shared with other consumers: how many is not known
    return _with_cardinality(ds, count)


UNKNOWN = -2  # DescribeSpec's elementCount, as tf.data.UNKNOWN_CARDINALITY
ENDLESS = -1  # as tf.data.INFINITE_CARDINALITY


def _with_cardinality(ds: tf.data.Dataset, count: int) -> tf.data.Dataset:
    """``ds`` with the element count the server described, so that Keras and progress
    bars know it (``len(ds)``, ``ds.cardinality()``)."""
    if count >= 0:
        return ds.apply(tf.data.experimental.assert_cardinality(count))
    if count == ENDLESS:
        return ds.apply(tf.data.experimental.assert_cardinality(tf.data.INFINITE_CARDINALITY))
    return ds


def _from_server(
    addr: Union[str, list[str]], spec: Optional[dict], dataset: Optional[str], client_options: Optional[dict]
) -> tuple[dict, int]:
    """``{feature: tf.TypeSpec}`` of a spec's (or the server's named ``dataset``'s) elements,
    and the server's count of them (tf.data's cardinality). TensorFlow's own parsing
    functions give the types where the spec alone says (see :func:`element_spec_of`); the
    server's ``DescribeSpec`` gives what only the files say (CSV columns named by a header,
    Parquet and Arrow columns) and what transforms write."""
    if spec is None and not dataset:
        raise ValueError("readerd.tf needs a spec or dataset= (or element_spec=)")
    with Client(addr, **(client_options or {})) as client:
        description = client.describe(spec) if spec is not None else client.describe(dataset=dataset)
        if spec is None:
            spec = client.list_datasets()[dataset]
    try:
        parsed: Optional[dict] = element_spec_of(spec)
    except _KnownFromFiles:
        parsed = None
    return _described(description, parsed, transformed=_has_transforms(spec)), description["elementCount"]


def _has_transforms(spec: dict) -> bool:
    components = spec.get("mix", {}).get("datasets", [])
    return bool(spec.get("transforms")) or any(c.get("transforms") for c in components)


class Reader(tf.Module):
    """A private readerd stream as a ``tf.data.Dataset`` that knows how far the training
    loop got, in a checkpointable variable, as a tf.data iterator in a ``tf.train.Checkpoint``
    does (``from_generator`` datasets cannot be checkpointed by TensorFlow itself).

    ``position`` (a string ``tf.Variable``) is where the loop is: the newest checkpoint
    token of the stream and how many elements the loop took after it. Save it with
    ``tf.train.Checkpoint(model=model, data=reader)``, or with Keras through
    :class:`BackupAndRestore`; a new process restores it first, and :meth:`dataset` then
    resumes right after the last element the loop took: exactly, nothing repeated or lost.

    An element counts as taken when the loop has it: handed out by iterating the reader
    itself (``for batch in reader:``), counted by :class:`BackupAndRestore` as Keras
    finishes a step, or told by :meth:`taken`. Elements read ahead (tf.data prefetches)
    do not count. When a pass over a finite spec has been taken to its end, the position
    goes back to the start: the next iteration (Keras's next epoch) reads the spec again.

    Private readers only (no ``shared_name``): a shared reader's elements are shared by
    its consumers, and its checkpoints are the reader's (``Client.checkpoint_reader``)."""

    def __init__(
        self,
        addr: Union[str, list[str]],
        spec: Optional[dict] = None,
        *,
        element_spec: Optional[dict] = None,
        client_options: Optional[dict] = None,
        name: Optional[str] = None,
        **read_options: Any,
    ) -> None:
        super().__init__(name=name)
        if read_options.get("shared_name"):
            raise ValueError("readerd.tf.Reader resumes private streams: drop shared_name, or use readerd.tf.dataset")
        if "resume" in read_options:
            raise ValueError("readerd.tf.Reader resumes from its position: restore the checkpoint instead of resume=")
        count = UNKNOWN
        if element_spec is None:
            element_spec, count = _from_server(addr, spec, read_options.get("dataset"), client_options)
        read_options.setdefault("checkpoint_every", 100)
        self.position = tf.Variable(_START, dtype=tf.string, trainable=False, name="position")
        # Plain Python state, kept out of TensorFlow's tracking.
        self._stream = _StreamOf(addr, spec, dict(element_spec), client_options or {}, read_options)
        self._count = count

    @property
    def element_spec(self) -> dict:
        return self._stream.signature

    def dataset(self) -> tf.data.Dataset:
        """The stream from ``position`` on, as a ``tf.data.Dataset``; each iteration opens
        a new stream there (an iteration abandoned before its end counts for nothing)."""
        stream = self._stream
        token, skip, taken = _parse_position(self.position.numpy())

        def elements():
            yield from stream.elements(*_parse_position(self.position.numpy()))

        ds = tf.data.Dataset.from_generator(elements, output_signature=stream.signature)
        # A resumed pass gives fewer elements than the passes after it: its dataset's
        # count is left unknown.
        return _with_cardinality(ds, self._count) if (token, skip, taken) == (None, 0, 0) else ds

    def __iter__(self):
        """Iterates :meth:`dataset`, each element taken as it is handed out."""
        for element in self.dataset():
            self.taken(1)
            yield element
        self.settle()

    def taken(self, count: int = 1) -> None:
        """The training loop took ``count`` more elements: ``position`` moves past them."""
        position = self._stream.take(count)
        if position is not None:
            self.position.assign(_format_position(position))

    def settle(self) -> None:
        """At the end of a pass (Keras's epoch end): if the stream ended and the loop took
        every element, the next iteration starts from the beginning."""
        if self._stream.finished():
            self.position.assign(_START)


class BackupAndRestore(tf.keras.callbacks.BackupAndRestore):
    """Keras's ``BackupAndRestore`` that backs up and restores a :class:`Reader`'s position
    with the model, so that ``model.fit(reader.dataset(), ...)`` killed and run again goes
    on with the element after the last one the backed-up model trained on.

    Each step Keras finishes takes its batches from the reader; the position is written
    (atomically) before Keras writes the model, kept with the one before it, and restored
    as the one of the epoch and batch Keras's own metadata restores."""

    _POSITIONS = "readerd_position.json"

    def __init__(self, backup_dir: str, reader: Reader, **options: Any) -> None:
        super().__init__(backup_dir, **options)
        self.reader = reader
        self._steps_taken = 0

    def on_epoch_begin(self, epoch: int, logs: Optional[dict] = None) -> None:
        self._steps_taken = 0
        super().on_epoch_begin(epoch, logs)

    def on_train_batch_end(self, batch: int, logs: Optional[dict] = None) -> None:
        # `batch` is the epoch's last finished step (with steps_per_execution, several).
        self.reader.taken(batch + 1 - self._steps_taken)
        self._steps_taken = batch + 1
        super().on_train_batch_end(batch, logs)

    def on_epoch_end(self, epoch: int, logs: Optional[dict] = None) -> None:
        self.reader.settle()
        super().on_epoch_end(epoch, logs)

    def _positions_path(self) -> str:
        return os.path.join(self.backup_dir, self._POSITIONS)

    def _save_model(self) -> None:
        os.makedirs(self.backup_dir, exist_ok=True)
        saved = self._read_positions()
        entry = {"epoch": self._current_epoch, "batch": self._last_batch_seen,
                 "position": self.reader.position.numpy().decode()}  # fmt: skip
        positions = {"current": entry, "previous": saved.get("current")}
        tmp = self._positions_path() + ".tmp"
        with open(tmp, "w") as f:
            json.dump(positions, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._positions_path())
        super()._save_model()

    def _read_positions(self) -> dict:
        try:
            with open(self._positions_path()) as f:
                return json.load(f)
        except FileNotFoundError:
            return {}

    def _load_model(self) -> None:
        super()._load_model()
        metadata_path = os.path.join(self.backup_dir, "training_metadata.json")
        if not os.path.exists(metadata_path):
            return
        with open(metadata_path) as f:
            metadata = json.load(f)
        saved = self._read_positions()
        for entry in (saved.get("current"), saved.get("previous")):
            if entry and (entry["epoch"], entry["batch"]) == (metadata.get("epoch"), metadata.get("batch")):
                self.reader.position.assign(entry["position"])
                return
        raise RuntimeError(
            f"{self.backup_dir}: the model backup (epoch {metadata.get('epoch')}, batch {metadata.get('batch')}) "
            f"has no readerd position saved with it ({self._POSITIONS}): the data would not resume where it was"
        )


_START = json.dumps({"token": None, "after": 0, "taken": 0})

# Where a loop is: the newest token, the elements taken after it, and the elements of the
# pass taken in all (what is left of the pass is the spec's count less these).
Position = tuple[Optional[str], int, int]


def _parse_position(value: Union[bytes, str]) -> Position:
    text = value.decode() if isinstance(value, bytes) else value
    try:
        position = json.loads(text or _START)
        return position.get("token"), int(position.get("after", 0)), int(position.get("taken", 0))
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f"readerd.tf.Reader: not a position a Reader saved: {text[:80]!r}") from exc


def _format_position(position: Position) -> str:
    return json.dumps({"token": position[0], "after": position[1], "taken": position[2]})


class _StreamOf:
    """The streams of a :class:`Reader`, one per iteration, and the positions after the
    elements the newest handed to TensorFlow and the loop has not taken yet."""

    def __init__(self, addr: Any, spec: Optional[dict], signature: dict, client_options: dict, read_options: dict):
        self.addr, self.spec, self.signature = addr, spec, signature
        self.client_options, self.read_options = client_options, read_options
        self._lock = threading.Lock()
        self._iteration = 0
        self._pending: collections.deque = collections.deque()
        self._ended = False

    def elements(self, token: Optional[str], skip: int, taken: int):
        with self._lock:
            self._iteration += 1
            iteration = self._iteration
            self._pending.clear()
            self._ended = False
        options = dict(self.read_options)
        if token is not None:
            options["resume"] = token
        with Client(self.addr, **self.client_options).read(self.spec, **options) as stream:
            since = 0  # elements received after `token`
            for element in stream:
                since += 1
                if since <= skip:  # taken before the position was saved: not again
                    continue
                newest, covered = stream.last_token, stream.last_token_seq
                taken_then = taken + since - skip
                if newest is not None and covered is not None and newest != token:
                    position = (newest, stream.seq - covered, taken_then)
                else:
                    position = (token, since, taken_then)
                with self._lock:
                    if iteration != self._iteration:
                        return  # a newer iteration started: this one was abandoned
                    self._pending.append(position)
                yield {name: _value(element[name], self.signature[name]) for name in self.signature}
        with self._lock:
            if iteration == self._iteration:
                self._ended = True

    def take(self, count: int) -> Optional[Position]:
        with self._lock:
            if count > len(self._pending):
                raise RuntimeError(
                    f"readerd.tf.Reader: {count} elements taken, but its dataset handed out {len(self._pending)} "
                    "not yet taken (is another dataset of this reader iterated at the same time?)"
                )
            position = None
            for _ in range(count):
                position = self._pending.popleft()
            return position

    def finished(self) -> bool:
        with self._lock:
            return self._ended and not self._pending


def _value(tensor: Any, spec: tf.TypeSpec) -> Any:
    if isinstance(tensor, Sparse):
        return tf.SparseTensor(tensor.indices, _value(tensor.values, None), tensor.dense_shape)
    if isinstance(tensor, Ragged):
        flat = _value(tensor.flat_values, None)
        return tf.RaggedTensor.from_nested_row_splits(flat, tensor.nested_row_splits, validate=False)
    if isinstance(tensor, Strings):
        return np.asarray(tensor)
    if spec is not None and spec.dtype == tf.bfloat16:  # widened to float32 by the client
        return tf.cast(tensor, tf.bfloat16)
    return tensor


def _described(description: dict, parsed: Optional[dict], transformed: bool) -> dict:
    """The element spec: the features TensorFlow parses from the spec (``parsed``) as it
    parses them; those the transforms write (always dense), and all of them when only the
    files say (``parsed`` is None), as the server describes them (static shapes: a 224x224
    crop is ``[B, 224, 224, 3]``)."""
    if parsed is not None and not transformed:
        return parsed
    batch = int(description.get("batchSize", 0))
    lead = [batch if description.get("dropRemainder") else None] if batch > 0 else []
    out = {}
    for feature in description.get("features", []):
        name, kind = feature["name"], feature.get("kind", "DENSE")
        if parsed is not None and name in parsed and kind != "DENSE":
            out[name] = parsed[name]  # sparse, ragged or padded: untouched by transforms
            continue
        shape = lead + [None if int(d) < 0 else int(d) for d in feature.get("shape", [])]
        dtype = _dtype(feature["dtype"])
        if kind == "SPARSE":
            out[name] = tf.SparseTensorSpec(shape, dtype)
        elif kind == "RAGGED" and len(shape) > 1:
            splits = _dtype(feature.get("rowSplitsDtype") or "INT64")
            out[name] = tf.RaggedTensorSpec(shape, dtype, ragged_rank=len(shape) - 1, row_splits_dtype=splits)
        else:
            out[name] = tf.TensorSpec(shape, dtype)
    return out


class _KnownFromFiles(ValueError):
    """The spec alone does not say what its elements hold: its files do."""


# --- element specs, by TensorFlow's own parsing functions ---------------------------------

_DTYPES = {
    "INT8": tf.int8, "INT16": tf.int16, "INT32": tf.int32, "INT64": tf.int64, "UINT8": tf.uint8,
    "UINT16": tf.uint16, "BOOL": tf.bool, "FLOAT16": tf.float16, "BFLOAT16": tf.bfloat16,
    "FLOAT32": tf.float32, "FLOAT64": tf.float64, "COMPLEX64": tf.complex64, "STRING": tf.string,
}  # fmt: skip


def _dtype(name: str) -> tf.DType:
    if name not in _DTYPES:
        raise ValueError(f"unknown dtype {name!r}")
    return _DTYPES[name]


def _partition(partition: dict) -> Any:
    kinds = {
        "rowSplits": tf.io.RaggedFeature.RowSplits,
        "rowLengths": tf.io.RaggedFeature.RowLengths,
        "rowStarts": tf.io.RaggedFeature.RowStarts,
        "rowLimits": tf.io.RaggedFeature.RowLimits,
        "valueRowIds": tf.io.RaggedFeature.ValueRowIds,
    }
    for key, kind in kinds.items():
        if key in partition:
            return kind(partition[key])
    return tf.io.RaggedFeature.UniformRowLength(int(partition["uniformRowLength"]))


def _feature(name: str, feature: dict) -> Any:
    """A readerd ``FeatureSpec`` (proto3 JSON) as the ``tf.io`` feature spec it stands for."""
    if "fixedLen" in feature:
        f = feature["fixedLen"]
        return tf.io.FixedLenFeature([int(d) for d in f.get("shape", [])], _dtype(f["dtype"]))
    if "fixedLenSequence" in feature:
        f = feature["fixedLenSequence"]
        shape = [int(d) for d in f.get("shape", [])]
        return tf.io.FixedLenSequenceFeature(shape, _dtype(f["dtype"]), allow_missing=True)
    if "varLen" in feature:
        return tf.io.VarLenFeature(_dtype(feature["varLen"]["dtype"]))
    if "sparse" in feature:
        f = feature["sparse"]
        index = f["indexKeys"][0] if len(f["indexKeys"]) == 1 else f["indexKeys"]
        size = [int(d) for d in f["size"]]
        return tf.io.SparseFeature(index, f["valueKey"], _dtype(f["dtype"]), size[0] if len(size) == 1 else size)
    if "ragged" in feature:
        f = feature["ragged"]
        return tf.io.RaggedFeature(
            _dtype(f["dtype"]),
            value_key=f.get("valueKey") or name,
            partitions=[_partition(p) for p in f.get("partitions", [])],
            row_splits_dtype=_dtype(f.get("rowSplitsDtype", "INT32")),
        )
    raise ValueError(f"feature {name}: no kind")


def _signature_of(parse: Any, batch: Optional[int], batched: bool) -> dict:
    """The element spec of ``parse`` applied to a batch of serialized records."""
    records = tf.TensorSpec([batch] if batched else [], tf.string)
    return tf.data.Dataset.from_generator(lambda: iter(()), output_signature=records).map(parse).element_spec


def element_spec_of(spec: dict) -> dict:
    """``{feature: tf.TypeSpec}`` of the elements a readerd ``spec`` (proto3 JSON) yields."""
    if "mix" in spec:
        # The components decode to the same features (the server checks it); the outer
        # pipeline batches them.
        first = spec["mix"].get("datasets", [{}])[0]
        return element_spec_of({**first, "pipeline": spec.get("pipeline", {})})
    pipeline = spec.get("pipeline", {})
    batch_size = int(pipeline.get("batchSize", 0))
    batched = batch_size > 0
    batch = batch_size if batched and pipeline.get("dropRemainder") else None
    decoder = spec.get("decoder", {})
    if "example" in decoder:
        features = {n: _feature(n, f) for n, f in decoder["example"].get("features", {}).items()}
        parse = (lambda x: tf.io.parse_example(x, features)) if batched else (
            lambda x: tf.io.parse_single_example(x, features))
        return dict(_signature_of(parse, batch, batched))
    if "sequenceExample" in decoder:
        context = {n: _feature(n, f) for n, f in decoder["sequenceExample"].get("context", {}).items()}
        sequence = {n: _feature(n, f) for n, f in decoder["sequenceExample"].get("sequence", {}).items()}

        def parse_sequence(x):
            if batched:
                parsed = tf.io.parse_sequence_example(x, context, sequence)
            else:
                # One record has no lengths (the server sends `length/` with batches only).
                parsed = (*tf.io.parse_single_sequence_example(x, context, sequence), {})
            out = {}
            for prefix, part in zip(("context", "sequence", "length"), parsed):
                out.update({f"{prefix}/{n}": v for n, v in part.items()})
            return out

        return dict(_signature_of(parse_sequence, batch, batched))
    if "csv" in decoder:
        columns = decoder["csv"].get("columns", [])
        if any(not c.get("name") for c in columns) and spec.get("source", {}).get("header"):
            raise _KnownFromFiles("CSV columns named by the files' header")
        lead = [batch] if batched else []
        return {c.get("name") or f"col{i}": tf.TensorSpec(lead, _dtype(c["dtype"])) for i, c in enumerate(columns)}
    if "columns" in decoder:
        raise _KnownFromFiles("Parquet or Arrow columns, typed by the files")
    lead = [batch] if batched else []
    if "raw" in decoder:
        raw = decoder["raw"]
        dtype = _dtype(raw["outType"])
        length = int(raw.get("fixedLength", 0)) or int(spec.get("source", {}).get("recordBytes", 0))
        count = length // dtype.size if length and length % dtype.size == 0 else None
        return {"value": tf.TensorSpec(lead + [count], dtype)}
    return {"value": tf.TensorSpec(lead, tf.string)}
