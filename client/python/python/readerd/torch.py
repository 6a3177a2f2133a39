"""``readerd.torch.IterableDataset``: a readerd stream as a PyTorch ``IterableDataset``.

Imported on demand (``import readerd.torch``); it needs torch, which the readerd package
does not depend on. Each item is a dict of tensors: dense numeric arrays become
``torch.Tensor`` (``torch.from_numpy``, no copy, read-only memory: copy before writing
into them), strings stay numpy object arrays, ``Sparse`` becomes a sparse COO tensor and
``Ragged`` stays as it is.

With a ``DataLoader`` of several workers, give a ``shared_name``: the workers then share
one reader and each element goes to one of them; with a private reader every worker
would read the whole dataset.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Optional

try:
    import torch
    from torch.utils.data import IterableDataset as _TorchIterableDataset
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("readerd.torch needs PyTorch: pip install torch") from exc

import numpy as np

from .client import Client
from .tensors import Sparse

__all__ = ["IterableDataset", "to_torch"]


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
    """Streams ``Client(addr).read(spec, **read_options)``; ``last_token`` is the latest
    checkpoint token of the current iteration (pass it as ``resume=`` to continue)."""

    def __init__(self, addr: str, spec: Optional[dict] = None, **read_options: Any) -> None:
        super().__init__()
        self.addr, self.spec, self.read_options = addr, spec, read_options
        self.last_token: Optional[str] = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        with Client(self.addr).read(self.spec, **self.read_options) as stream:
            for element in stream:
                self.last_token = stream.last_token
                yield {name: to_torch(tensor) for name, tensor in element.items()}
