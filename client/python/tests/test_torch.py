"""``readerd.torch``: the DataLoader workers of one job read each record once, as shards
of private readers (``readerd.shards``, tested without torch in test_shards.py) or as
consumers of one shared reader. Runs where torch is installed (skipped otherwise).
"""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

import readerd
from test_shards import SPEC, write_ids

torch = pytest.importorskip("torch")
import readerd.torch as readerd_torch  # noqa: E402
import readerd.torch as readerd_torch  # noqa: E402


def loader_ids(dataset: readerd_torch.IterableDataset) -> list[int]:
    ids = []
    for batch in readerd_torch.loader(dataset, num_workers=2):
        assert isinstance(batch["id"], torch.Tensor) and batch["id"].dtype == torch.int64
        assert isinstance(batch["img"], readerd.Strings) and batch["img"][0].startswith(b"\x89PNG")
        ids += batch["id"].tolist()
    return ids


def test_dataloader_workers_read_their_shards(server, data_root: Path) -> None:
    expected = write_ids(data_root, 4, 10)
    assert sorted(loader_ids(readerd_torch.IterableDataset(server.addr, SPEC))) == expected


def test_dataloader_workers_share_a_reader(server, data_root: Path) -> None:
    """With in_order=False (readerd.torch.loader): in order, the DataLoader would wait for
    a worker with nothing left to read while another holds the rest."""
    expected = write_ids(data_root, 4, 10)
    dataset = readerd_torch.IterableDataset(server.addr, SPEC, container="job", shared_name="train")
    counts = collections.Counter(loader_ids(dataset))
    assert sorted(counts) == expected and set(counts.values()) == {1}


def test_dataloader_workers_over_a_named_dataset_need_a_shared_reader(server, data_root: Path) -> None:
    write_ids(data_root, 1, 2)
    with pytest.raises(ValueError, match="give a shared_name"):
        loader_ids(readerd_torch.IterableDataset(server.addr, dataset="demo"))
