"""``readerd.tf.dataset``: a readerd stream as a ``tf.data.Dataset``, for tf.data (service)
users moving over.

    import readerd.tf

    ds = readerd.tf.dataset("127.0.0.1:50051", spec)        # any Client.read option too
    for batch in ds:                                         # {"label": tf.Tensor, ...}
        train_step(batch)

Its ``element_spec`` comes from the spec, computed by TensorFlow itself: the spec's decoder
becomes ``tf.io`` feature specs (``FixedLenFeature``, ``VarLenFeature``, ``SparseFeature``,
``RaggedFeature``...) and the element spec is what ``tf.io.parse_example`` (or
``parse_single_example``, ``parse_sequence_example``, ``decode_csv``, ``decode_raw``) gives
for a batch of the spec's size, so a model built on a tf.data pipeline's ``element_spec``
takes readerd's dataset unchanged. The batch dimension is ``None`` unless the spec drops
remainders. CSV columns named by the files' header (no ``name`` in the spec) cannot be
known before reading: pass ``element_spec=`` then.

Imported on demand (``import readerd.tf``); it needs TensorFlow, which the readerd package
does not depend on. The elements are read by the native client (``readerd.Client``), then
handed to TensorFlow (which copies them into its tensors).
"""

from __future__ import annotations

from typing import Any, Optional, Union

try:
    import tensorflow as tf
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("readerd.tf needs TensorFlow: pip install tensorflow-cpu") from exc

import numpy as np

from .client import Client
from .tensors import Ragged, Sparse, Strings

__all__ = ["dataset", "element_spec_of"]


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
    Each iteration of the dataset opens a new stream (with ``resume=``, from that token)."""
    if element_spec is None:
        if spec is None:
            raise ValueError("readerd.tf.dataset needs the spec, or element_spec= (with a named dataset or resume=)")
        element_spec = element_spec_of(spec)
        if spec.get("transforms"):
            with Client(addr, **(client_options or {})) as client:
                element_spec = _transformed(element_spec, client.describe(spec))
    signature = dict(element_spec)

    def elements():
        with Client(addr, **(client_options or {})).read(spec, **read_options) as stream:
            for element in stream:
                yield {name: _value(element[name], signature[name]) for name in signature}

    return tf.data.Dataset.from_generator(elements, output_signature=signature)


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


def _transformed(decoded: dict, description: dict) -> dict:
    """The element spec of a spec with ``transforms``: the decoder's features as TensorFlow
    parses them, with those the transforms write (always dense) as the server describes
    them (static shapes: a 224x224 crop is ``[B, 224, 224, 3]``), and those dropped gone."""
    batch = int(description.get("batchSize", 0))
    lead = [batch if description.get("dropRemainder") else None] if batch > 0 else []
    out = {}
    for feature in description.get("features", []):
        name, kind = feature["name"], feature.get("kind", "DENSE")
        shape = lead + [None if int(d) < 0 else int(d) for d in feature.get("shape", [])]
        if kind == "DENSE":
            out[name] = tf.TensorSpec(shape, _dtype(feature["dtype"]))
        else:  # sparse, ragged or padded: untouched by transforms, as TensorFlow parses them
            out[name] = decoded[name]
    return out


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
            raise ValueError("CSV columns named by the files' header: pass element_spec=")
        lead = [batch] if batched else []
        return {c.get("name") or f"col{i}": tf.TensorSpec(lead, _dtype(c["dtype"])) for i, c in enumerate(columns)}
    lead = [batch] if batched else []
    if "raw" in decoder:
        raw = decoder["raw"]
        dtype = _dtype(raw["outType"])
        length = int(raw.get("fixedLength", 0)) or int(spec.get("source", {}).get("recordBytes", 0))
        count = length // dtype.size if length and length % dtype.size == 0 else None
        return {"value": tf.TensorSpec(lead + [count], dtype)}
    return {"value": tf.TensorSpec(lead, tf.string)}
