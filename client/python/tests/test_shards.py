"""Worker shards (``readerd.shards``, what ``readerd.torch`` gives each DataLoader worker
of a private reader): the workers of every rank together read each record once."""

from __future__ import annotations

from pathlib import Path

import pytest

import readerd
from readerd.shards import worker_spec
from readerd.tfrecord import example, write_tfrecord

SPEC = {
    "source": {"files": ["part-*.tfrecord"], "format": "TFRECORD"},
    "decoder": {"example": {"features": {"id": {"fixedLen": {"dtype": "INT64", "shape": []}},
                                         "img": {"fixedLen": {"dtype": "STRING", "shape": []}}}}},
    "pipeline": {"seed": 3, "shuffleFiles": True, "batchSize": 4},
}  # fmt: skip


def write_ids(root: Path, files: int, per_file: int) -> list[int]:
    for f in range(files):
        records = [example({"id": f * 1000 + i, "img": b"\x89PNG%d" % i}) for i in range(per_file)]
        write_tfrecord(root / f"part-{f}.tfrecord", records)
    return sorted(f * 1000 + i for f in range(files) for i in range(per_file))


def read_ids(addr: str, spec: dict) -> list[int]:
    with readerd.Client(addr).read(spec) as stream:
        return [int(i) for batch in stream for i in batch["id"]]


def test_worker_spec_splits_the_spec_shard() -> None:
    spec = {"source": {"files": ["a"]}, "pipeline": {"shard": {"count": 2, "index": 1}, "seed": 4}}
    shards = [worker_spec(spec, w, 3)["pipeline"]["shard"] for w in range(3)]
    assert shards == [{"count": 6, "index": 1}, {"count": 6, "index": 3}, {"count": 6, "index": 5}]
    assert worker_spec({"source": {}}, 1, 2)["pipeline"] == {"shard": {"count": 2, "index": 1}}
    assert spec["pipeline"]["shard"] == {"count": 2, "index": 1}  # the caller's spec is left as it was
    with pytest.raises(ValueError, match="worker 2 of 2"):
        worker_spec(spec, 2, 2)
    with pytest.raises(ValueError, match="apply per shard"):
        worker_spec({"source": {}, "pipeline": {"select": {"take": 10}}}, 0, 2)


@pytest.mark.parametrize("files", [6, 2])  # shards by file, and by record (fewer files than workers)
def test_worker_shards_read_each_record_once(server, data_root: Path, files: int) -> None:
    expected = write_ids(data_root, files, 9)
    for ranks in (1, 2):  # with and without a shard of the spec's own (DDP ranks)
        ids: list[int] = []
        for rank in range(ranks):
            ranked = {**SPEC, "pipeline": {**SPEC["pipeline"], "shard": {"count": ranks, "index": rank}}}
            for worker in range(3):
                ids += read_ids(server.addr, worker_spec(ranked, worker, 3))
        assert sorted(ids) == expected, (files, ranks)


