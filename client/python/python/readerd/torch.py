"""``readerd.torch.IterableDataset``: a readerd stream as a PyTorch ``IterableDataset``.

Imported on demand (``import readerd.torch``); it needs torch, which the readerd package
does not depend on. Each item is a dict of tensors: dense numeric arrays become
``torch.Tensor`` (``torch.from_numpy``, no copy, read-only memory: copy before writing
into them), strings stay ``readerd.Strings``, ``Sparse`` becomes a sparse COO tensor and
``Ragged`` stays as it is. :func:`loader` makes the ``DataLoader`` (``batch_size=None``:
the spec batches).

With a ``DataLoader`` of several workers each worker opens its own stream, in one of two
ways:

- **a shared reader** (``shared_name=...``): every worker is a consumer of the one reader,
  and each element goes to one of them, as the workers ask (dynamic, like tf.data
  service's; an element a worker took but did not finish when it died goes to another).
  The ``DataLoader`` needs ``in_order=False`` (:func:`loader` sets it): in order, it waits
  for the next worker in turn, which may have nothing to read while the elements left
  are held, unacknowledged, by a worker it does not ask; each element is delivered once,
  so that wait never ends;
- **shards** (no ``shared_name``): worker ``w`` of ``n`` reads shard ``w`` of the spec's
  ``pipeline.shard`` split ``n`` ways further (:func:`worker_spec`), so together the
  workers read each record once. Static, like ``tf.data``'s ``shard``.

A private reader without shards would give every worker the whole dataset, so several
workers over a named ``dataset`` (no spec to shard) need a ``shared_name``.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any, Optional

try:
    import torch
    from torch.utils.data import DataLoader
    from torch.utils.data import IterableDataset as _TorchIterableDataset
    from torch.utils.data import get_worker_info
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("readerd.torch needs PyTorch: pip install torch") from exc

import numpy as np

from .client import Client
from .shards import worker_spec
from .tensors import Sparse

__all__ = ["IterableDataset", "loader", "to_torch", "worker_spec"]


def to_torch(value: Any) -> Any:
    """A decoded tensor as torch sees it (see the module docstring)."""
    if isinstance(value, np.ndarray) and value.dtype != object:
        return torch.from_numpy(value)
    if isinstance(value, Sparse):
        return torch.sparse_coo_tensor(
            torch.from_numpy(value.indices).T, torch.from_numpy(value.values), tuple(value.dense_shape.tolist())
        )
    return value


class IterableDataset(_TorchIterableDataset):
    """Streams ``Client(addr, **client_options).read(spec, **read_options)`` in each
    worker (the worker's shard of ``spec`` unless ``shared_name`` is given). ``last_token``
    is the latest checkpoint token of the current iteration in this process: with
    ``num_workers=0`` pass it as ``resume=`` to continue; a worker's token stays in the
    worker (checkpoint a shared reader with ``Client.read(...).checkpoint()`` instead)."""

    def __init__(
        self,
        addr: str,
        spec: Optional[dict] = None,
        *,
        client_options: Optional[dict] = None,
        **read_options: Any,
    ) -> None:
        super().__init__()
        self.addr, self.spec, self.read_options = addr, spec, read_options
        self.client_options = client_options or {}
        self.last_token: Optional[str] = None

    def _worker_spec(self) -> Optional[dict]:
        info = get_worker_info()
        if info is None or info.num_workers == 1 or self.read_options.get("shared_name"):
            return self.spec
        if self.spec is None:
            raise ValueError(
                f"{info.num_workers} DataLoader workers over a named dataset would each read all of it: "
                "give a shared_name (one shared reader) or a spec (one shard per worker)"
            )
        return worker_spec(self.spec, info.id, info.num_workers)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        spec = self._worker_spec()
        with Client(self.addr, **self.client_options).read(spec, **self.read_options) as stream:
            for element in stream:
                self.last_token = stream.last_token
                yield {name: to_torch(tensor) for name, tensor in element.items()}


def loader(dataset: IterableDataset, num_workers: int = 0, **dataloader_options: Any) -> DataLoader:
    """A ``DataLoader`` over ``dataset``: ``batch_size=None`` (the spec batches), and over a
    shared reader ``in_order=False`` (see the module docstring)."""
    dataloader_options.setdefault("batch_size", None)
    if dataset.read_options.get("shared_name") and num_workers > 1:
        if "in_order" not in inspect.signature(DataLoader).parameters:
            raise RuntimeError("DataLoader workers over a shared reader need in_order=False (torch 2.6 or later)")
        dataloader_options.setdefault("in_order", False)
    return DataLoader(dataset, num_workers=num_workers, **dataloader_options)
