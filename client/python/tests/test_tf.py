"""``readerd.tf`` against TensorFlow's own pipeline on the same files: the same
``element_spec`` and the same values (dense, sparse, ragged, strings; Examples, CSV,
Parquet, named datasets, transforms), and ``Reader`` resumed exactly by Keras's
``BackupAndRestore`` and by a ``tf.train.Checkpoint`` loop after SIGKILL.

``.ci/run`` runs these with real tensorflow-cpu (``tests/tests/python_adapters.rs``, in
the venv ``tests/run.sh`` makes); elsewhere they are skipped where TensorFlow is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

import readerd.tf  # noqa: E402
from readerd.tfrecord import example, write_tfrecord  # noqa: E402

FEATURES = {
    "label": {"fixedLen": {"dtype": "INT64", "shape": []}},
    "x": {"fixedLen": {"dtype": "FLOAT32", "shape": [2]}},
    "name": {"fixedLen": {"dtype": "STRING", "shape": []}},
    "tok": {"varLen": {"dtype": "INT64"}},
    "seq": {"fixedLenSequence": {"dtype": "FLOAT32", "shape": [], "allowMissing": True}},
    "pairs": {"sparse": {"indexKeys": ["ix"], "valueKey": "vals", "dtype": "FLOAT32", "size": [10]}},
    "spans": {"ragged": {"dtype": "FLOAT32", "valueKey": "spans", "partitions": [{"rowLengths": "span_lens"}],
                         "rowSplitsDtype": "INT64"}},
}  # fmt: skip

TF_FEATURES = {
    "label": tf.io.FixedLenFeature([], tf.int64),
    "x": tf.io.FixedLenFeature([2], tf.float32),
    "name": tf.io.FixedLenFeature([], tf.string),
    "tok": tf.io.VarLenFeature(tf.int64),
    "seq": tf.io.FixedLenSequenceFeature([], tf.float32, allow_missing=True),
    "pairs": tf.io.SparseFeature("ix", "vals", tf.float32, 10),
    "spans": tf.io.RaggedFeature(tf.float32, value_key="spans",
                                 partitions=[tf.io.RaggedFeature.RowLengths("span_lens")], row_splits_dtype=tf.int64),
}  # fmt: skip


def write_examples(path: Path, n: int) -> None:
    records = []
    for i in range(n):
        records.append(example({
            "label": i, "x": [i * 0.5, -1.0], "name": b"n%d" % i, "tok": list(range(i % 3)),
            "seq": [float(j) for j in range(i % 4 + 1)], "ix": [i % 10], "vals": [i * 0.25],
            "span_lens": [i % 2, 1], "spans": [float(j) for j in range(i % 2 + 1)],
        }))  # fmt: skip
    write_tfrecord(path, records)


def plain(value):
    """A tensor's values as nested Python lists, whatever its kind."""
    if isinstance(value, tf.SparseTensor):
        return [value.indices.numpy().tolist(), value.values.numpy().tolist(), value.dense_shape.numpy().tolist()]
    if isinstance(value, tf.RaggedTensor):
        return value.to_list()
    array = value.numpy()
    return array.tolist() if isinstance(array, np.ndarray) else array


@pytest.mark.parametrize("pipeline", [{"batchSize": 4}, {"batchSize": 4, "dropRemainder": True}, {}])
def test_examples_as_tensorflow_parses_them(server, data_root: Path, pipeline: dict) -> None:
    write_examples(data_root / "ex.tfrecord", 10)
    spec = {"source": {"files": ["ex.tfrecord"], "format": "TFRECORD"}, "decoder": {"example": {"features": FEATURES}},
            "pipeline": pipeline}  # fmt: skip
    ours = readerd.tf.dataset(server.addr, spec)
    theirs = tf.data.TFRecordDataset(str(data_root / "ex.tfrecord"))
    if pipeline:
        theirs = theirs.batch(4, drop_remainder=bool(pipeline.get("dropRemainder")))
        theirs = theirs.map(lambda x: tf.io.parse_example(x, TF_FEATURES))
    else:
        theirs = theirs.map(lambda x: tf.io.parse_single_example(x, TF_FEATURES))
    assert ours.element_spec == theirs.element_spec
    got, expected = list(ours), list(theirs)
    assert len(got) == len(expected) == (2 if pipeline.get("dropRemainder") else 3 if pipeline else 10)
    for a, b in zip(got, expected):
        assert {k: plain(v) for k, v in a.items()} == {k: plain(v) for k, v in b.items()}


def test_csv_columns_as_decode_csv_gives_them(server, data_root: Path) -> None:
    (data_root / "t.csv").write_text("1,2.5,a\n2,,b\n3,4,c\n")
    columns = [{"name": "id", "dtype": "INT64"}, {"name": "price", "dtype": "FLOAT32", "default": {"floatValues": [0.0]}},
               {"name": "city", "dtype": "STRING"}]  # fmt: skip
    spec = {"source": {"files": ["t.csv"], "format": "CSV"}, "decoder": {"csv": {"columns": columns}},
            "pipeline": {"batchSize": 2}}  # fmt: skip
    ours = readerd.tf.dataset(server.addr, spec)
    theirs = tf.data.experimental.CsvDataset(str(data_root / "t.csv"), [tf.int64, [0.0], tf.string]).batch(2)
    theirs = theirs.map(lambda i, p, c: {"id": i, "price": p, "city": c})
    assert ours.element_spec == theirs.element_spec
    for a, b in zip(list(ours), list(theirs), strict=True):
        assert {k: plain(v) for k, v in a.items()} == {k: plain(v) for k, v in b.items()}
    assert np.isclose(list(ours)[0]["price"].numpy(), [2.5, 0.0]).all()


def ids_in_tfrecord_and_csv(data_root: Path, a: str, a_count: int, b: str, b_count: int, mix: dict) -> tuple:
    """Ids 0.. in TFRecord ``a`` and 1000.. in CSV ``b``: readerd's mixture spec of the two
    (``mix``'s fields added), and TensorFlow's datasets of them as ``{"id": ...}``."""
    write_tfrecord(data_root / a, [example({"id": i, "w": [0.5, i]}) for i in range(a_count)])
    (data_root / b).write_text("".join(f"{1000 + i},{i},1.5\n" for i in range(b_count)))
    features = {"id": {"fixedLen": {"dtype": "INT64", "shape": []}}}
    columns = [{"name": "id", "dtype": "INT64"}]
    spec = {"mix": {"datasets": [
        {"source": {"files": [a], "format": "TFRECORD"}, "decoder": {"example": {"features": features}}},
        {"source": {"files": [b], "format": "CSV"}, "decoder": {"csv": {"columns": columns, "selectCols": [0]}}}],
        **mix}}  # fmt: skip
    theirs_a = tf.data.TFRecordDataset(str(data_root / a)).map(
        lambda x: tf.io.parse_single_example(x, {"id": tf.io.FixedLenFeature([], tf.int64)}))
    theirs_b = tf.data.experimental.CsvDataset(str(data_root / b), [tf.int64], select_cols=[0]).map(
        lambda i: {"id": i})
    return spec, theirs_a, theirs_b


def records_in_turn(data_root: Path, files: tuple[str, ...], cycle: list[int]) -> tf.data.Dataset:
    """TensorFlow's ``choose_from_datasets`` over the records of ``files`` (TFRecords) in
    ``cycle``'s order, repeated, not stopping at an empty one."""
    records = [tf.data.TFRecordDataset(str(data_root / f)) for f in files]
    choice = tf.data.Dataset.from_tensor_slices(tf.constant(cycle, tf.int64)).repeat()
    return tf.data.Dataset.choose_from_datasets(records, choice, stop_on_empty_dataset=False)


@pytest.mark.parametrize("stop", [False, True])
def test_a_mixture_as_sample_from_datasets_gives_it(server, data_root: Path, stop: bool) -> None:
    """The same element_spec as ``sample_from_datasets`` over the two parsed datasets, every
    record once without stopping; with ``stopOnEmptyDataset`` both take all of the smaller
    component (it runs out first) and about as many of the larger (negative binomial:
    mean 51, standard deviation 10, for 50 records at weights 1 / 1), never all."""
    spec, a, b = ids_in_tfrecord_and_csv(data_root, "a.tfrecord", 400, "b.csv", 50, {"stopOnEmptyDataset": stop})
    spec["pipeline"] = {"batchSize": 8, "seed": 3}
    ours = readerd.tf.dataset(server.addr, spec)
    theirs = tf.data.Dataset.sample_from_datasets([a, b], seed=3, stop_on_empty_dataset=stop).batch(8)
    assert ours.element_spec == theirs.element_spec
    for dataset in (ours, theirs):
        ids = [int(i) for batch in dataset for i in batch["id"].numpy()]
        assert len(set(ids)) == len(ids)
        big = [i for i in ids if i < 1000]
        assert sorted(i for i in ids if i >= 1000) == list(range(1000, 1050))
        if stop:
            assert abs(len(big) - 51) < 50 and len(big) < 400
        else:
            assert sorted(big) == list(range(400))


@pytest.mark.parametrize("stop", [False, True])
def test_a_choice_cycle_gives_what_choose_from_datasets_gives(server, data_root: Path, stop: bool) -> None:
    """``mix.choice`` against ``choose_from_datasets`` over the same cycle repeated: the
    same ids in the same order, with and without ``stopOnEmptyDataset``."""
    mix = {"choice": [0, 1, 1], "stopOnEmptyDataset": stop}
    spec, a, b = ids_in_tfrecord_and_csv(data_root, "ca.tfrecord", 10, "cb.csv", 30, mix)
    spec["pipeline"] = {"batchSize": 4}
    ours = readerd.tf.dataset(server.addr, spec)
    choice = tf.data.Dataset.from_tensor_slices(tf.constant([0, 1, 1], tf.int64)).repeat()
    theirs = tf.data.Dataset.choose_from_datasets([a, b], choice, stop_on_empty_dataset=stop).batch(4)
    ids = [[int(i) for batch in dataset for i in batch["id"].numpy()] for dataset in (ours, theirs)]
    assert ids[0] == ids[1]
    assert len(ids[0]) == (30 if stop else 40)


def test_a_batched_mixture_of_varlen_and_ragged_features_is_what_tensorflow_batches(server, data_root: Path) -> None:
    """A batched mixture (in a fixed order, so TensorFlow's is the same sequence) of two
    components with a VarLen and a ragged feature: each batch's sparse and ragged tensors
    are what ``parse_example`` gives for the batches of ``choose_from_datasets`` over the
    records."""
    def tokens(i: int) -> list[int]:
        return [i * 10 + k for k in range(6 if i % 7 == 0 else i % 3)]

    write_tfrecord(data_root / "va.tfrecord", [example({"id": i, "tok": tokens(i), "rv": tokens(i + 1)}) for i in range(1, 13)])
    write_tfrecord(data_root / "vb.tfrecord", [example({"id": i, "tok": tokens(i), "rv": tokens(i + 1)}) for i in range(100, 126)])
    features = {"id": {"fixedLen": {"dtype": "INT64", "shape": []}}, "tok": {"varLen": {"dtype": "INT64"}},
                "rag": {"ragged": {"dtype": "INT64", "valueKey": "rv"}}}  # fmt: skip
    component = lambda file: {"source": {"files": [file], "format": "TFRECORD"},  # noqa: E731
                              "decoder": {"example": {"features": features}}}  # fmt: skip
    spec = {"mix": {"datasets": [component("va.tfrecord"), component("vb.tfrecord")], "choice": [0, 1, 1]},
            "pipeline": {"batchSize": 5}}  # fmt: skip
    ours = readerd.tf.dataset(server.addr, spec)
    parse = {"id": tf.io.FixedLenFeature([], tf.int64), "tok": tf.io.VarLenFeature(tf.int64),
             "rag": tf.io.RaggedFeature(tf.int64, value_key="rv")}  # fmt: skip
    mixed = records_in_turn(data_root, ("va.tfrecord", "vb.tfrecord"), [0, 1, 1])
    theirs = mixed.batch(5).map(lambda x: tf.io.parse_example(x, parse))
    widths = set()
    for a, b in zip(list(ours), list(theirs), strict=True):
        assert a["id"].numpy().tolist() == b["id"].numpy().tolist()
        for part in ("indices", "values", "dense_shape"):
            assert getattr(a["tok"], part).numpy().tolist() == getattr(b["tok"], part).numpy().tolist(), part
        assert a["rag"].to_list() == b["rag"].to_list()
        widths.add(int(b["tok"].dense_shape[1]))
    assert len(widths) > 1, widths


def sequence_example(i: int) -> bytes:
    """A SequenceExample: context ``id`` ``i``, and ``i % 3 + 1`` steps of one int64."""
    sequence = tf.train.SequenceExample()
    sequence.context.feature["id"].int64_list.value.append(i)
    for k in range(i % 3 + 1):
        sequence.feature_lists.feature_list["steps"].feature.add().int64_list.value.append(i * 10 + k)
    return sequence.SerializeToString()


def test_an_unbatched_mixture_of_sequence_examples_is_what_tensorflow_parses(server, data_root: Path) -> None:
    """SequenceExample components, unbatched, in a fixed order: each element's context and
    feature list (dense steps) as ``parse_single_sequence_example`` gives them, no
    ``length/`` feature (the server sends lengths with batches only)."""
    write_tfrecord(data_root / "sa.tfrecord", [sequence_example(i) for i in range(5)])
    write_tfrecord(data_root / "sb.tfrecord", [sequence_example(i) for i in range(100, 108)])
    context = {"id": {"fixedLen": {"dtype": "INT64", "shape": []}}}
    steps = {"steps": {"fixedLenSequence": {"dtype": "INT64", "shape": []}}}
    component = lambda file: {"source": {"files": [file], "format": "TFRECORD"},  # noqa: E731
                              "decoder": {"sequenceExample": {"context": context, "sequence": steps}}}  # fmt: skip
    spec = {"mix": {"datasets": [component("sa.tfrecord"), component("sb.tfrecord")], "choice": [0, 1]}}
    ours = list(readerd.tf.dataset(server.addr, spec))
    parse = {"id": tf.io.FixedLenFeature([], tf.int64)}, {"steps": tf.io.FixedLenSequenceFeature([], tf.int64)}
    theirs = records_in_turn(data_root, ("sa.tfrecord", "sb.tfrecord"), [0, 1]).map(
        lambda x: tf.io.parse_single_sequence_example(x, *parse))
    assert len(ours) == 13
    for a, (c, s) in zip(ours, list(theirs), strict=True):
        assert sorted(a) == ["context/id", "sequence/steps"]
        assert int(a["context/id"]) == int(c["id"])
        assert a["sequence/steps"].numpy().tolist() == s["steps"].numpy().tolist()


def test_a_batched_mixture_of_components_that_decode_alike_pads_as_parse_example(server, data_root: Path) -> None:
    """Components with the same decoder, batched: a ``fixedLenSequence`` feature padded
    (with its default) to each batch's longest row, as ``parse_example`` pads the batches
    of ``choose_from_datasets`` over the records."""
    def record(i: int) -> bytes:
        return example({"id": i, "tok": [i * 10 + k for k in range(6 if i % 7 == 0 else i % 3)]})

    write_tfrecord(data_root / "pa.tfrecord", [record(i) for i in range(1, 13)])
    write_tfrecord(data_root / "pb.tfrecord", [record(i) for i in range(100, 126)])
    features = {"id": {"fixedLen": {"dtype": "INT64", "shape": []}},
                "tok": {"fixedLenSequence": {"dtype": "INT64", "shape": [], "allowMissing": True,
                                             "default": {"int64Values": [-1]}}}}  # fmt: skip
    component = lambda file: {"source": {"files": [file], "format": "TFRECORD"},  # noqa: E731
                              "decoder": {"example": {"features": features}}}  # fmt: skip
    spec = {"mix": {"datasets": [component("pa.tfrecord"), component("pb.tfrecord")], "choice": [0, 1, 1]},
            "pipeline": {"batchSize": 5}}  # fmt: skip
    ours = list(readerd.tf.dataset(server.addr, spec))
    parse = {"id": tf.io.FixedLenFeature([], tf.int64),
             "tok": tf.io.FixedLenSequenceFeature([], tf.int64, allow_missing=True, default_value=-1)}  # fmt: skip
    mixed = records_in_turn(data_root, ("pa.tfrecord", "pb.tfrecord"), [0, 1, 1])
    theirs = list(mixed.batch(5).map(lambda x: tf.io.parse_example(x, parse)))
    assert len(ours) == len(theirs) == 8
    for a, b in zip(ours, theirs, strict=True):
        assert a["id"].numpy().tolist() == b["id"].numpy().tolist()
        assert a["tok"].numpy().tolist() == b["tok"].numpy().tolist()
    assert len({b["tok"].shape[1] for b in theirs}) > 1


def test_a_batched_mixture_of_sequence_examples_is_what_parse_sequence_example_gives(server, data_root: Path) -> None:
    """SequenceExample components with the same decoder, batched: each batch's context,
    feature lists and lengths as ``parse_sequence_example`` gives them for the batches of
    ``choose_from_datasets`` over the records."""
    write_tfrecord(data_root / "qa.tfrecord", [sequence_example(i) for i in range(5)])
    write_tfrecord(data_root / "qb.tfrecord", [sequence_example(i) for i in range(100, 108)])
    context = {"id": {"fixedLen": {"dtype": "INT64", "shape": []}}}
    steps = {"steps": {"fixedLenSequence": {"dtype": "INT64", "shape": []}}}
    component = lambda file: {"source": {"files": [file], "format": "TFRECORD"},  # noqa: E731
                              "decoder": {"sequenceExample": {"context": context, "sequence": steps}}}  # fmt: skip
    spec = {"mix": {"datasets": [component("qa.tfrecord"), component("qb.tfrecord")], "choice": [0, 1]},
            "pipeline": {"batchSize": 4}}  # fmt: skip
    ours = list(readerd.tf.dataset(server.addr, spec))
    parse = {"id": tf.io.FixedLenFeature([], tf.int64)}, {"steps": tf.io.FixedLenSequenceFeature([], tf.int64)}
    mixed = records_in_turn(data_root, ("qa.tfrecord", "qb.tfrecord"), [0, 1])
    theirs = list(mixed.batch(4).map(lambda x: tf.io.parse_sequence_example(x, *parse)))
    assert len(ours) == len(theirs) == 4
    for a, (c, s, n) in zip(ours, theirs, strict=True):
        assert sorted(a) == ["context/id", "length/steps", "sequence/steps"]
        assert a["context/id"].numpy().tolist() == c["id"].numpy().tolist()
        assert a["sequence/steps"].numpy().tolist() == s["steps"].numpy().tolist()
        assert a["length/steps"].numpy().tolist() == n["steps"].numpy().tolist()


def test_a_spec_with_transforms_has_the_static_shapes_the_server_describes(server, data_root: Path) -> None:
    from test_transforms import SPEC, write_cifar

    records = write_cifar(data_root)
    spec = dict(SPEC, pipeline={"batchSize": 4, "dropRemainder": True})
    ds = readerd.tf.dataset(server.addr, spec)
    assert ds.element_spec == {
        "label": tf.TensorSpec([4, 1], tf.uint8),
        "image": tf.TensorSpec([4, 32, 32, 3], tf.uint8),
        "scaled": tf.TensorSpec([4, 32, 32, 3], tf.float32),
    }
    first = next(iter(ds))
    np.testing.assert_array_equal(first["image"].numpy(), records[:4, 1:].reshape(4, 3, 32, 32).transpose(0, 2, 3, 1))


DEMO = Path(__file__).resolve().parents[3] / "demo"


@pytest.mark.parametrize("name", ["train.json", "train_parquet.json"])
def test_the_demo_specs_need_no_element_spec(server, data_root: Path, name: str) -> None:
    """CSV columns named by the file's header and Parquet columns typed by the file: the
    server reads them, and the dataset's elements are the file's rows."""
    spec = json.loads((DEMO / "specs" / name).read_text())
    shutil.copy(DEMO / spec["source"]["files"][0], data_root)
    spec["pipeline"] = {"batchSize": 32, "numEpochs": 1}  # in file order
    ds = readerd.tf.dataset(server.addr, spec)
    assert ds.element_spec == {
        "id": tf.TensorSpec([None], tf.int64),
        "x1": tf.TensorSpec([None], tf.float32),
        "x2": tf.TensorSpec([None], tf.float32),
        "x3": tf.TensorSpec([None], tf.float32),
        "label": tf.TensorSpec([None], tf.int64),
    }
    batches = list(ds)
    assert sum(len(b["id"]) for b in batches) == 2000
    theirs = next(iter(tf.data.experimental.make_csv_dataset(
        str(DEMO / "train.csv"), batch_size=32, shuffle=False, num_epochs=1,
        column_defaults=[tf.int64, tf.float32, tf.float32, tf.float32, tf.int64])))  # fmt: skip
    for key in ds.element_spec:
        np.testing.assert_array_equal(batches[0][key].numpy(), theirs[key].numpy())


def test_a_named_dataset_needs_no_element_spec(data_root: Path, tmp_path: Path) -> None:
    spec = json.loads((DEMO / "specs" / "train_parquet.json").read_text())
    shutil.copy(DEMO / "train.parquet", data_root)
    config = tmp_path / "datasets.json"
    config.write_text(json.dumps({"train": spec}))
    from helpers import Server

    server = Server(data_root, tmp_path / "named-state", tmp_path / "named.log", ["--datasets", str(config)])
    server.start()
    try:
        ds = readerd.tf.dataset(server.addr, dataset="train")
        assert ds.element_spec["x1"] == tf.TensorSpec([None], tf.float32)
        assert sum(len(b["id"]) for b in ds) == 2000
    finally:
        server.stop()


def write_ids(data_root: Path, n: int) -> dict:
    write_tfrecord(data_root / "ids.tfrecord", [example({"id": i, "x": [i * 0.01, 1.0]}) for i in range(n)])
    return {
        "source": {"files": ["ids.tfrecord"], "format": "TFRECORD"},
        "decoder": {"example": {"features": {"id": {"fixedLen": {"dtype": "INT64", "shape": []}},
                                             "x": {"fixedLen": {"dtype": "FLOAT32", "shape": [2]}}}}},
        "pipeline": {"batchSize": 8, "numEpochs": 1, "seed": 7, "shuffle": {"bufferSize": 32}},
    }  # fmt: skip


def train(mode: str, server, spec_path: Path, backup: Path, log: Path, epochs: int, kill_at: int = 0) -> int:
    trainer = Path(__file__).with_name("tf_trainer.py")
    args = [sys.executable, str(trainer), mode, server.addr, str(spec_path), str(backup), str(log), str(epochs), "3"]
    process = subprocess.run(args + ([str(kill_at)] if kill_at else []), capture_output=True, text=True, timeout=300)
    assert process.returncode == (-9 if kill_at else 0), process.stderr[-3000:]
    return process.returncode


@pytest.mark.parametrize("mode", ["keras", "loop"])
def test_a_trainer_killed_mid_epoch_resumes_after_the_last_step_it_saved(
    server, data_root: Path, tmp_path: Path, mode: str
) -> None:
    """``kill -9`` at step 19 of 24 (two passes of 12 batches), saved every 3 steps: run
    again, the trainer restores the step-18 backup and trains on each element of the second
    pass after it, once, in the order an uninterrupted read gives."""
    spec = write_ids(data_root, 96)
    spec_path = tmp_path / "ids.json"
    spec_path.write_text(json.dumps(spec))
    with readerd.Client(server.addr) as client, client.read(spec) as stream:
        one_pass = [element["id"].tolist() for element in stream]
    assert len(one_pass) == 12
    backup, log = tmp_path / "backup", tmp_path / "trained.jsonl"
    train(mode, server, spec_path, backup, log, epochs=2, kill_at=19)
    first = [json.loads(line) for line in log.read_text().splitlines()]
    assert first == one_pass + one_pass[:7]  # step 19 trained, then killed before its backup
    log.unlink()
    train(mode, server, spec_path, backup, log, epochs=2)
    second = [json.loads(line) for line in log.read_text().splitlines()]
    assert second == one_pass[6:]  # after the step-18 backup: steps 7..12 of the second pass


def test_a_finite_parquet_spec_has_the_cardinality_keras_shows(server, data_root: Path) -> None:
    spec = json.loads((DEMO / "specs" / "train_parquet.json").read_text())
    shutil.copy(DEMO / "train.parquet", data_root)
    ds = readerd.tf.dataset(server.addr, spec)  # 2,000 rows in batches of 32
    assert int(ds.cardinality()) == len(ds) == 63 == sum(1 for _ in ds)
    assert int(readerd.tf.Reader(server.addr, spec).dataset().cardinality()) == 63
    endless = dict(spec, pipeline={"batchSize": 32, "numEpochs": -1})
    assert int(readerd.tf.dataset(server.addr, endless).cardinality()) == int(tf.data.INFINITE_CARDINALITY)
    csv = json.loads((DEMO / "specs" / "train.json").read_text())
    csv["pipeline"]["numEpochs"] = 1
    shutil.copy(DEMO / "train.csv", data_root)
    assert int(readerd.tf.dataset(server.addr, csv).cardinality()) == int(tf.data.UNKNOWN_CARDINALITY)
