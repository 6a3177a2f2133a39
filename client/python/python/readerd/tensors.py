"""The tensor types of the Python client, and Arrow record batches of readerd's Flight
plane back to them (:func:`decode_batch`, for pyarrow users; it needs pyarrow).

The native client (``readerd._native``) makes dense numeric tensors as read-only numpy
arrays over the received buffers, STRING tensors as :class:`Strings` (zero-copy values),
and sparse and ragged ones as :class:`Sparse` and :class:`Ragged` below.

On the Flight plane, the layout (``server/src/columns.rs``): one row per example of a batch (one row for an
unbatched element), one column per feature, field metadata ``readerd.dtype`` and
``readerd.kind``, and each batch's ``app_metadata`` holds the full ``shapes`` of its dense
and sparse tensors and the static shapes of its ragged ones (``readerd.ragged_rank`` in
their field metadata). A dense tensor is rebuilt by flattening its column down to the flat
value buffer and reshaping it, without copying for numeric dtypes; numpy arrays made this
way are read-only views of the received buffers.

Copies happen only where numpy has no equivalent type: strings become object arrays of
``bytes``, BOOL is unpacked from Arrow's bits, BFLOAT16 becomes float32 (exact).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

import numpy as np

from ._native import Strings

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Sparse", "Ragged", "Strings", "Tensor", "decode_batch"]


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
    outermost first (for a batch, ``nested_row_splits[0]`` splits the batch).

    ``shape`` is TensorFlow's static shape (``RaggedTensor.shape``): the number of rows,
    each partition's uniform row length or ``None`` where rows vary, then the inner
    dimensions of ``flat_values``, which are real numpy dimensions."""

    flat_values: np.ndarray
    nested_row_splits: tuple[np.ndarray, ...]
    shape: tuple[Optional[int], ...]

    @property
    def ragged_rank(self) -> int:
        return len(self.nested_row_splits)


Tensor = Union[np.ndarray, Strings, Sparse, Ragged]


def _storage(array: pa.Array) -> pa.Array:
    import pyarrow as pa

    return array.storage if isinstance(array, pa.ExtensionArray) else array


def _is_list(array: pa.Array) -> bool:
    import pyarrow as pa

    return isinstance(array, (pa.ListArray, pa.LargeListArray, pa.FixedSizeListArray))


def _leaf(array: pa.Array) -> pa.Array:
    """The flat values under every list level of ``array`` (slices respected, no copy)."""
    array = _storage(array)
    while _is_list(array):
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


def _ragged(column: pa.Array, metadata: dict, shape: list, batched: bool) -> Ragged:
    import pyarrow as pa

    dtype = metadata[b"readerd.dtype"].decode()
    ragged_rank = int(metadata[b"readerd.ragged_rank"])
    splits_dtype = np.int32 if metadata.get(b"readerd.row_splits_dtype") == b"INT32" else np.int64
    array = _storage(column)
    if not batched:  # an unbatched element is wrapped in one more list of length 1
        array = _storage(array.flatten())
    splits = []
    for _ in range(ragged_rank):
        if isinstance(array, pa.FixedSizeListArray):  # a partition of uniform row length
            splits.append(np.arange(len(array) + 1, dtype=splits_dtype) * array.type.list_size)
        else:
            splits.append(_row_splits(array))
        array = _storage(array.flatten())
    inner = shape[ragged_rank + 1 :]
    flat = _numpy(_leaf(array), dtype).reshape(len(array), *inner)
    return Ragged(flat, tuple(splits), tuple(shape))


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
            tensors[field.name] = _ragged(column, metadata, shapes[field.name], batched)
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
