"""``readerd.torch.IterableDataset``: a readerd stream as a PyTorch ``IterableDataset``.

Imported on demand (``import readerd.torch``); it needs torch, which the readerd package
does not depend on. Each item is a dict of tensors: dense numeric arrays become
``torch.Tensor``s you may write into (copied out of the receive buffer, which is
immutable; ``writable=False`` hands out the buffer itself, no copy, to be read only),
strings stay ``readerd.Strings``, ``Sparse`` becomes a sparse COO tensor and ``Ragged``
stays as it is. :func:`loader` makes the ``DataLoader`` (``batch_size=None``: the spec
batches); a ``DataLoader`` that would batch the spec's batches again is refused.

**Resuming**, as torchdata's ``StatefulDataLoader``: :func:`loader`'s ``state_dict()``
says how far the training loop got, worker by worker (each worker's newest checkpoint
token and how many elements it handed out after it), and ``load_state_dict()`` on a new
loader (the same spec and ``num_workers``) resumes each worker there: exactly, with
``num_workers`` 0 or more, for private readers (shards). A shared reader resumes as
shared readers do (elements handed out but not acknowledged are delivered again).

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
import sys
import warnings
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

__all__ = ["IterableDataset", "Loader", "loader", "to_torch", "worker_spec"]

# The key under which a worker's position rides on each element to the loader (removed there).
_STATE_KEY = "__readerd_state__"


def to_torch(value: Any, writable: bool = True) -> Any:
    """A decoded tensor as torch sees it (see the module docstring)."""
    if isinstance(value, np.ndarray) and value.dtype != object:
        if not value.flags.writeable:
            if writable:
                value = value.copy()
            else:
                with warnings.catch_warnings():  # read only by contract (writable=False)
                    warnings.simplefilter("ignore", UserWarning)
                    return torch.from_numpy(value)
        return torch.from_numpy(value)
    if isinstance(value, Sparse):
        return torch.sparse_coo_tensor(
            torch.from_numpy(value.indices).T, torch.from_numpy(value.values), tuple(value.dense_shape.tolist())
        )
    return value


class IterableDataset(_TorchIterableDataset):
    """Streams ``Client(addr, **client_options).read(spec, **read_options)`` in each
    worker (the worker's shard of ``spec`` unless ``shared_name`` is given). ``last_token``
    is the latest checkpoint token of the current iteration in this process; with
    ``num_workers=0``, ``state_dict()``/``load_state_dict()`` here resume exactly, and
    :class:`Loader` does the same for any number of workers."""

    def __init__(
        self,
        addr: str,
        spec: Optional[dict] = None,
        *,
        client_options: Optional[dict] = None,
        writable: bool = True,
        **read_options: Any,
    ) -> None:
        super().__init__()
        self.addr, self.spec, self.read_options = addr, spec, read_options
        self.client_options = client_options or {}
        self.writable = writable
        self.last_token: Optional[str] = None
        # Where this process's iteration is: (token, elements handed out after it).
        self._position: tuple[Optional[str], int] = (None, 0)
        # Where each worker (by id; -1: the main process) resumes, from load_state_dict.
        self._resume: dict[int, tuple[Optional[str], int]] = {}
        self._rotation = 0
        self._with_state = False

    def _worker(self) -> int:
        """This worker's place among the shards (-1: no workers). A resumed loader's
        workers are rotated so that the one whose turn was next comes first, as the
        interrupted loader would have gone on (its in-order round robin)."""
        info = get_worker_info()
        return -1 if info is None else (info.id + self._rotation) % info.num_workers

    def _worker_spec(self) -> Optional[dict]:
        info = get_worker_info()
        if info is None or info.num_workers == 1 or self.read_options.get("shared_name"):
            return self.spec
        if self.spec is None:
            raise ValueError(
                f"{info.num_workers} DataLoader workers over a named dataset would each read all of it: "
                "give a shared_name (one shared reader) or a spec (one shard per worker)"
            )
        return worker_spec(self.spec, self._worker(), info.num_workers)

    def _check_not_batched_again(self) -> None:
        """A ``DataLoader`` with automatic batching (its default ``batch_size=1``) would
        stack the spec's batches into a new leading dimension: refused, saying what to do."""
        batch_size = ((self.spec or {}).get("pipeline") or {}).get("batchSize", 0)
        if not int(batch_size or 0):
            return
        frame = sys._getframe(1)
        while frame is not None:
            # torch's fetchers hold `auto_collation` (the iterators `_auto_collation`).
            locals_ = frame.f_locals
            owner = locals_.get("self")
            auto = locals_.get("auto_collation", getattr(owner, "auto_collation", getattr(owner, "_auto_collation", None)))
            if auto is True:
                raise ValueError(
                    "readerd.torch.IterableDataset yields whole batches (the spec's batchSize), and this DataLoader "
                    "batches them again into a new leading dimension: use readerd.torch.loader(dataset) or "
                    "DataLoader(dataset, batch_size=None)"
                )
            frame = frame.f_back

    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._check_not_batched_again()
        spec = self._worker_spec()
        worker = self._worker()
        # Resumed from `token`, `skip` elements after it were handed out already.
        token, skip = self._resume.get(worker, (None, 0))
        options = dict(self.read_options)
        options.setdefault("checkpoint_every", 100)
        if token is not None:
            options["resume"] = token
        self._position = (token, skip)
        with Client(self.addr, **self.client_options).read(spec, **options) as stream:
            since = 0  # elements received after `token`
            for element in stream:
                since += 1
                if since <= skip:  # handed out before the state was saved: not again
                    continue
                self.last_token = stream.last_token
                covered = stream.last_token_seq
                if self.last_token is not None and covered is not None and self.last_token != token:
                    self._position = (self.last_token, stream.seq - covered)
                else:
                    self._position = (token, since)
                item = {name: to_torch(tensor, self.writable) for name, tensor in element.items()}
                if self._with_state:
                    item[_STATE_KEY] = (worker, self._position)
                yield item

    def __len__(self) -> int:
        """The elements one iteration gives (``num_workers=0``; :class:`Loader` counts
        its workers' shards), where the server knows it before reading
        (``Client.describe``'s ``elementCount``: Parquet and Arrow files, fixed-length
        files); ``TypeError`` otherwise, as for an iterable without a length."""
        return _element_count(self, self.spec)

    def state_dict(self) -> dict:
        """This process's position (``num_workers=0``): resumed by ``load_state_dict``."""
        token, after = self._position
        return {"workers": {-1: {"token": token, "after": after}}}

    def load_state_dict(self, state: dict) -> None:
        self._resume = {int(w): (s.get("token"), int(s.get("after", 0))) for w, s in state.get("workers", {}).items()}
        self._rotation = int(state.get("next_worker", 0))
        self._position = self._resume.get(-1, (None, 0))


class Loader(DataLoader):
    """A ``DataLoader`` over a :class:`IterableDataset` that knows how far the training
    loop got with each worker (``state_dict``) and resumes there (``load_state_dict``,
    before iterating), as torchdata's ``StatefulDataLoader``."""

    def __init__(self, dataset: IterableDataset, *args: Any, **kwargs: Any) -> None:
        dataset._with_state = True
        super().__init__(dataset, *args, **kwargs)
        self._positions: dict[int, tuple[Optional[str], int]] = dict(dataset._resume)
        self._next_worker = dataset._rotation

    def __iter__(self) -> Iterator[Any]:
        for item in super().__iter__():
            if isinstance(item, dict) and _STATE_KEY in item:
                worker, position = item.pop(_STATE_KEY)
                self._positions[int(worker)] = tuple(position)
                self._next_worker = (int(worker) + 1) % max(self.num_workers, 1)
            yield item

    def __len__(self) -> int:
        """The elements an iteration gives: each worker's shard counted (see
        :meth:`IterableDataset.__len__`)."""
        dataset = self.dataset
        if self.num_workers <= 1 or dataset.read_options.get("shared_name"):
            return len(dataset)
        return sum(
            _element_count(dataset, worker_spec(dataset.spec, w, self.num_workers)) if dataset.spec is not None
            else len(dataset) for w in range(self.num_workers)
        )  # fmt: skip

    def state_dict(self) -> dict:
        return {
            "num_workers": self.num_workers,
            "next_worker": self._next_worker,
            "workers": {w: {"token": t, "after": a} for w, (t, a) in self._positions.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        if int(state.get("num_workers", self.num_workers)) != self.num_workers:
            raise ValueError(
                f"the state was saved with num_workers={state.get('num_workers')}: resume with as many "
                f"(this loader has {self.num_workers}), each worker reading its own shard"
            )
        self.dataset.load_state_dict(state)
        self._positions = dict(self.dataset._resume)
        self._next_worker = self.dataset._rotation


def _element_count(dataset: IterableDataset, spec: Optional[dict]) -> int:
    """The elements ``spec`` gives, as the server describes it; ``TypeError`` where that is
    not known (a resumed or shared stream, a format counted only by reading it)."""
    options = dataset.read_options
    if options.get("resume") or dataset._resume or options.get("shared_name"):
        raise TypeError("readerd.torch: a resumed or shared stream has no length")
    with Client(dataset.addr, **dataset.client_options) as client:
        described = client.describe(spec) if spec is not None else client.describe(dataset=options.get("dataset", ""))
    count = described["elementCount"]
    if count < 0:
        raise TypeError(
            "readerd.torch: this spec's length is not known before reading it"
            + (" (it repeats forever)" if count == -1 else " (its files must be read to count its elements)")
        )
    return count


def loader(dataset: IterableDataset, num_workers: int = 0, **dataloader_options: Any) -> Loader:
    """A :class:`Loader` over ``dataset``: ``batch_size=None`` (the spec batches), and over
    a shared reader ``in_order=False`` (see the module docstring)."""
    dataloader_options.setdefault("batch_size", None)
    if dataset.read_options.get("shared_name") and num_workers > 1:
        if "in_order" not in inspect.signature(DataLoader).parameters:
            raise RuntimeError("DataLoader workers over a shared reader need in_order=False (torch 2.6 or later)")
        dataloader_options.setdefault("in_order", False)
    return Loader(dataset, num_workers=num_workers, **dataloader_options)
