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


def test_transformed_images_arrive_as_nchw_float_tensors(server, data_root: Path) -> None:
    """A spec whose transforms end in CHW (as torchvision's ToTensor gives) batches as
    ``[B, C, H, W]`` float32 tensors: the layout a torch model takes, made on the server."""
    from test_transforms import SPEC, write_cifar

    records = write_cifar(data_root)
    spec = dict(SPEC, transforms=[
        {"slice": {"feature": "value", "begin": [1], "size": [3072], "output": "image"}},
        {"reshape": {"feature": "image", "shape": [3, 32, 32]}},
        {"convertImageDtype": {"feature": "image", "dtype": "FLOAT32"}},
        {"drop": {"features": ["value"]}},
    ])  # fmt: skip
    batches = list(readerd_torch.loader(readerd_torch.IterableDataset(server.addr, spec)))
    image = batches[0]["image"]
    assert isinstance(image, torch.Tensor) and image.dtype == torch.float32
    assert tuple(image.shape) == (4, 3, 32, 32)
    want = torch.from_numpy(records[:4, 1:].reshape(4, 3, 32, 32).astype("float32")) * (1 / 255)
    torch.testing.assert_close(image, want)


def _cifar_loader(server, data_root: Path, **options):
    from test_transforms import SPEC, write_cifar

    records = write_cifar(data_root)
    spec = dict(SPEC, pipeline={"batchSize": 2, "shuffle": {"bufferSize": 4}, "seed": 3})
    return records, spec


def test_batches_are_writable_tensors_without_a_warning(server, data_root: Path) -> None:
    import warnings

    _, spec = _cifar_loader(server, data_root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "The given NumPy array is not writable" would fail
        batch = next(iter(readerd_torch.loader(readerd_torch.IterableDataset(server.addr, spec))))
        before = batch["image"].clone()
        batch["image"] += 1
    assert torch.equal(batch["image"], before + 1)


def test_a_dataloader_that_batches_again_is_refused_saying_what_to_do(server, data_root: Path) -> None:
    from torch.utils.data import DataLoader

    _, spec = _cifar_loader(server, data_root)
    with pytest.raises(ValueError, match="batch_size=None"):
        next(iter(DataLoader(readerd_torch.IterableDataset(server.addr, spec))))


@pytest.mark.parametrize("workers", [0, 2])
def test_state_dict_resumes_exactly(server, data_root: Path, workers: int) -> None:
    _, spec = _cifar_loader(server, data_root)

    def labels(loader, count=None):
        out = []
        for batch in loader:
            out.append(batch["label"].flatten().tolist())
            if count is not None and len(out) == count:
                break
        return out

    whole = labels(readerd_torch.loader(readerd_torch.IterableDataset(server.addr, spec), num_workers=workers))
    first = readerd_torch.loader(readerd_torch.IterableDataset(server.addr, spec, checkpoint_every=1), num_workers=workers)
    head = labels(first, 3)
    state = first.state_dict()
    del first
    again = readerd_torch.loader(readerd_torch.IterableDataset(server.addr, spec, checkpoint_every=1), num_workers=workers)
    again.load_state_dict(state)
    assert head + labels(again) == whole


def test_a_parquet_spec_has_a_length_counted_per_worker_shard(server, data_root: Path) -> None:
    """``len()`` of a finite Parquet spec, from the server before reading: the loader's
    batches, with 0 workers and with 2 (each its shard, each ending with its own partial
    batch); a spec whose files must be read to be counted has no length."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": pa.array(range(105), pa.int64())}), data_root / "ids.parquet")
    spec = {"source": {"files": ["ids.parquet"], "format": "PARQUET"}, "pipeline": {"batchSize": 10}}
    dataset = readerd_torch.IterableDataset(server.addr, spec)
    assert len(dataset) == 11 == sum(1 for _ in readerd_torch.loader(dataset))
    two = readerd_torch.loader(readerd_torch.IterableDataset(server.addr, spec), num_workers=2)
    assert len(two) == 12 == sum(1 for _ in two)  # 53 and 52 rows: 6 + 6 batches
    write_ids(data_root, 2, 3)
    with pytest.raises(TypeError, match="not known before reading"):
        len(readerd_torch.IterableDataset(server.addr, SPEC))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_trainer_killed_mid_epoch_resumes_from_its_saved_state_dict(
    server, data_root: Path, tmp_path: Path, workers: int
) -> None:
    """``kill -9`` at step 8 of 12, the loader's state saved every 3 steps: run again, the
    trainer loads the step-6 state and trains on each batch after it once, in the order an
    uninterrupted loader gives (with 2 workers, each its shard, in turn)."""
    import json
    import subprocess
    import sys

    from readerd.tfrecord import example, write_tfrecord

    write_tfrecord(data_root / "ids.tfrecord", [example({"id": i, "x": [i * 0.01, 1.0]}) for i in range(96)])
    spec = {
        "source": {"files": ["ids.tfrecord"], "format": "TFRECORD"},
        "decoder": {"example": {"features": {"id": {"fixedLen": {"dtype": "INT64", "shape": []}},
                                             "x": {"fixedLen": {"dtype": "FLOAT32", "shape": [2]}}}}},
        "pipeline": {"batchSize": 8, "seed": 7, "shuffle": {"bufferSize": 32}},
    }  # fmt: skip
    spec_path = tmp_path / "ids.json"
    spec_path.write_text(json.dumps(spec))
    whole = [b["id"].tolist() for b in readerd_torch.loader(readerd_torch.IterableDataset(server.addr, spec),
                                                            num_workers=workers)]  # fmt: skip
    assert len(whole) == 12 and sorted(sum(whole, [])) == list(range(96))
    state, log = tmp_path / "state.pt", tmp_path / "trained.jsonl"
    trainer = [sys.executable, str(Path(__file__).with_name("torch_trainer.py")), server.addr, str(spec_path),
               str(state), str(log), str(workers), "3"]  # fmt: skip
    killed = subprocess.run(trainer + ["8"], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-3000:]
    first = [json.loads(line) for line in log.read_text().splitlines()]
    assert first == whole[:8]
    log.unlink()
    resumed = subprocess.run(trainer, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    second = [json.loads(line) for line in log.read_text().splitlines()]
    assert second == whole[6:]  # after the step-6 state: batches 7..12
