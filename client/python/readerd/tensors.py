"""Arrow record batches of readerd's Flight plane back to numpy tensors.

The layout (``server/src/columns.rs``): one row per example of a batch (one row for an
unbatched element), one column per feature, field metadata ``readerd.dtype`` and
``readerd.kind``, and each batch's ``app_metadata`` holds the full ``shapes`` of its dense
and sparse tensors. A dense tensor is rebuilt by flattening its column down to the flat
value buffer and reshaping it, without copying for numeric dtypes; numpy arrays made this
way are read-only views of the received buffers.

Copies happen only where numpy has no equivalent type: strings become object arrays of
``bytes``, BOOL is unpacked from Arrow's bits, BFLOAT16 becomes float32 (exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np
import pyarrow as pa

__all__ = ["Sparse", "Ragged", "Tensor", "decode_batch"]


@dataclass(frozen=True)
class Sparse:
    """A sparse tensor (``tf.SparseTensor``): ``indices`` int64 ``[n, rank]``, ``values``
    ``[n]``, ``dense_shape`` int64 ``[rank]``."""

    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray


@dataclass(frozen=True)
class Ragged:
    """A ragged tensor (``tf.RaggedTensor``): ``flat_values`` and its row partitions,
    outermost first (for a batch, ``nested_row_splits[0]`` splits the batch)."""

    flat_values: np.ndarray
    nested_row_splits: tuple[np.ndarray, ...]


Tensor = Union[np.ndarray, Sparse, Ragged]

_LISTS = (pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray)


def _storage(array: pa.Array) -> pa.Array:
    return array.storage if isinstance(array, pa.ExtensionArray) else array


def _leaf(array: pa.Array) -> pa.Array:
    """The flat values under every list level of ``array`` (slices respected, no copy)."""
    array = _storage(array)
    while isinstance(array, _LISTS):
        array = _storage(array.flatten())
    return array


def _numpy(leaf: pa.Array, dtype: str) -> np.ndarray:
    """The values of a flat Arrow array as a 1-D numpy array of the tensor's dtype."""
    if dtype == "STRING":
        return leaf.to_numpy(zero_copy_only=False)  # object array of bytes
    if dtype == "COMPLEX64":  # fixed_size_binary(8): the bytes of re, im float32 pairs
        data = leaf.buffers()[1]
        return np.frombuffer(data, dtype=np.complex64, count=len(leaf), offset=leaf.offset * 8)
    if dtype == "BOOL":
        return leaf.to_numpy(zero_copy_only=False)
    values = leaf.to_numpy(zero_copy_only=True)
    if dtype == "BFLOAT16":  # travels as its uint16 bits: the high half of a float32
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values


def _row_splits(array: pa.Array) -> np.ndarray:
    """The offsets of a list array as row splits (starting at 0)."""
    offsets = array.offsets.to_numpy(zero_copy_only=True)
    return offsets - offsets[0] if len(offsets) and offsets[0] else offsets


def _ragged(column: pa.Array, dtype: str, batched: bool) -> Ragged:
    array = _storage(column)
    if not batched:  # an unbatched element is wrapped in one more list of length 1
        array = _storage(array.flatten())
    splits = []
    while isinstance(array, (pa.ListArray, pa.LargeListArray)):
        splits.append(_row_splits(array))
        array = _storage(array.flatten())
    if isinstance(array, pa.FixedSizeListArray):  # flat values of rank 2
        width = array.type.list_size
        flat = _numpy(_leaf(array), dtype).reshape(len(array), width)
    else:
        flat = _numpy(array, dtype)
    return Ragged(flat, tuple(splits))


def decode_batch(batch: pa.RecordBatch, shapes: dict[str, list[int]], batched: bool) -> dict[str, Tensor]:
    """The tensors of one element: ``batch`` laid out as ``columns.rs`` describes,
    ``shapes`` from its ``app_metadata``, ``batched`` from the schema's metadata."""
    tensors: dict[str, Tensor] = {}
    sparse: dict[str, dict[str, np.ndarray]] = {}
    for field, column in zip(batch.schema, batch.columns):
        metadata = field.metadata or {}
        dtype = metadata.get(b"readerd.dtype", b"").decode()
        kind = metadata.get(b"readerd.kind", b"dense").decode()
        if kind == "dense":
            tensors[field.name] = _numpy(_leaf(column), dtype).reshape(shapes[field.name])
        elif kind == "ragged":
            tensors[field.name] = _ragged(column, dtype, batched)
        elif kind in ("sparse_indices", "sparse_values"):
            name = metadata[b"readerd.feature"].decode()
            part = sparse.setdefault(name, {})
            if kind == "sparse_indices":
                part["indices"] = _numpy(_leaf(column), "INT64").reshape(-1, len(shapes[name]))
            else:
                part["values"] = _numpy(_leaf(column), dtype)
            if len(part) == 2:
                dense_shape = np.asarray(shapes[name], dtype=np.int64)
                tensors[name] = Sparse(part["indices"], part["values"], dense_shape)
        else:
            raise ValueError(f"column {field.name}: unknown readerd.kind {kind!r}")
    return tensors
