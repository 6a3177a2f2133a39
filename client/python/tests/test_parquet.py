"""Parquet and Arrow IPC files (``format: PARQUET`` / ``ARROW_IPC``): the tensors readerd
serves equal what pyarrow reads from the same files, row for row, in file order, for
every Arrow type a trainer uses, each compression, several row groups, nulls with a
default, and dictionary-encoded columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

import readerd

ROWS = 53


def table() -> pa.Table:
    rng = np.random.default_rng(7)
    tokens = [list(rng.integers(-5, 5, size=i % 4)) for i in range(ROWS)]
    return pa.table({
        "i8": pa.array(rng.integers(-128, 128, ROWS), pa.int8()),
        "i16": pa.array(rng.integers(-(2**15), 2**15, ROWS), pa.int16()),
        "i32": pa.array(rng.integers(-(2**31), 2**31, ROWS), pa.int32()),
        "i64": pa.array([-(2**63), 2**63 - 1] + list(rng.integers(-(2**40), 2**40, ROWS - 2)), pa.int64()),
        "u8": pa.array(rng.integers(0, 256, ROWS), pa.uint8()),
        "u16": pa.array(rng.integers(0, 2**16, ROWS), pa.uint16()),
        "f16": pa.array(rng.standard_normal(ROWS).astype(np.float16), pa.float16()),
        "f32": pa.array([np.nan, np.inf] + list(rng.standard_normal(ROWS - 2)), pa.float32()),
        "f64": pa.array(rng.standard_normal(ROWS), pa.float64()),
        "flag": pa.array(rng.integers(0, 2, ROWS).astype(bool), pa.bool_()),
        "text": pa.array([f"row {i} ✓" * (i % 3) for i in range(ROWS)], pa.string()),
        "blob": pa.array([bytes([i % 256, 0, 255]) * (i % 2) for i in range(ROWS)], pa.binary()),
        "tokens": pa.array(tokens, pa.list_(pa.int64())),
        "emb": pa.array([list(rng.standard_normal(3)) for _ in range(ROWS)], pa.list_(pa.float32(), 3)),
        "label": pa.array([None if i % 5 == 2 else i for i in range(ROWS)], pa.int64()),
        "city": pa.array([["oslo", "lima", "pune"][i % 3] for i in range(ROWS)]).dictionary_encode(),
    })


def spec(name: str, fmt: str = "PARQUET") -> dict:
    columns = [{"name": field} for field in table().column_names if field != "label"]
    columns.append({"name": "label", "default": {"int64Values": [-1]}})
    return {
        "source": {"files": [name], "format": fmt},
        "decoder": {"columns": {"columns": columns}},
        "pipeline": {"batchSize": 8},
    }


def served(client: readerd.Client, spec: dict) -> tuple[list[str], dict[str, list]]:
    """Every row's key, and each feature as one list of per-row values."""
    keys: list[str] = []
    columns: dict[str, list] = {}
    with client.read(spec) as stream:
        for batch in stream:
            keys.extend(stream.keys)
            for name, tensor in batch.items():
                columns.setdefault(name, []).extend(rows_of(tensor))
    return keys, columns


def rows_of(tensor) -> list:
    if isinstance(tensor, readerd.Ragged):
        splits = tensor.nested_row_splits[0]
        flat = tensor.flat_values
        return [flat[splits[i]:splits[i + 1]].tolist() for i in range(len(splits) - 1)]
    if isinstance(tensor, readerd.Strings):
        return list(tensor.tolist())
    return list(np.asarray(tensor))


def expected_rows(column: pa.ChunkedArray, name: str) -> list:
    if name == "label":
        return column.fill_null(-1).to_pylist()
    if pa.types.is_dictionary(column.type):
        column = column.cast(column.type.value_type)
    if pa.types.is_string(column.type):
        return [value.encode() for value in column.to_pylist()]
    if pa.types.is_list(column.type) or pa.types.is_fixed_size_list(column.type):
        return column.to_pylist()
    return list(column.to_numpy())


def assert_same_rows(name: str, ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs), name
    if ours and isinstance(ours[0], np.generic) and np.issubdtype(type(ours[0]), np.floating):
        np.testing.assert_array_equal(np.array(ours), np.array(theirs), err_msg=name)
        assert np.array(ours).dtype == np.array(theirs).dtype, name
    elif ours and isinstance(ours[0], np.ndarray):
        np.testing.assert_array_equal(np.stack(ours), np.array(theirs, dtype=ours[0].dtype), err_msg=name)
    elif ours and isinstance(ours[0], list) and ours[0] and isinstance(ours[0][0], float):
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(np.array(a, np.float32), np.array(b, np.float32), err_msg=name)
    else:
        assert ours == theirs, name
        if ours and isinstance(ours[0], np.generic):
            assert np.array(ours).dtype == np.array(theirs).dtype, name


@pytest.mark.parametrize("compression", ["snappy", "zstd", "none"])
def test_parquet_rows_are_pyarrows(server, data_root: Path, compression: str) -> None:
    data = table()
    name = f"t_{compression}.parquet"
    pq.write_table(data, data_root / name, row_group_size=7, compression=compression)
    assert pq.ParquetFile(data_root / name).metadata.num_row_groups == 8
    keys, columns = served(readerd.Client(server.addr), spec(name))
    assert keys == [f"{name}:{i}" for i in range(ROWS)], "one record per row, keyed by its row, in file order"
    reference = pq.read_table(data_root / name)
    assert sorted(columns) == sorted(reference.column_names)
    for column in reference.column_names:
        assert_same_rows(column, columns[column], expected_rows(reference[column], column))


def test_arrow_ipc_rows_are_pyarrows(server, data_root: Path) -> None:
    data = table()
    feather.write_feather(data, data_root / "t.arrow", compression="uncompressed", chunksize=10)
    keys, columns = served(readerd.Client(server.addr), spec("t.arrow", "ARROW_IPC"))
    assert keys == [f"t.arrow:{i}" for i in range(ROWS)]
    reference = feather.read_table(data_root / "t.arrow")
    for column in reference.column_names:
        assert_same_rows(column, columns[column], expected_rows(reference[column], column))


def test_every_column_without_a_decoder_and_a_projection_with_shapes(server, data_root: Path) -> None:
    """No decoder: every column, typed by the file. A projection reads only its columns,
    and a list column with a shape is dense."""
    data = pa.table({
        "id": pa.array(range(6), pa.int64()),
        "pair": pa.array([[i, -i] for i in range(6)], pa.list_(pa.int32())),
        "skip": pa.array([b"x"] * 6, pa.binary()),
    })
    pq.write_table(data, data_root / "p.parquet", row_group_size=4)
    client = readerd.Client(server.addr)
    _, every = served(client, {"source": {"files": ["p.parquet"], "format": "PARQUET"}, "pipeline": {"batchSize": 6}})
    assert sorted(every) == ["id", "pair", "skip"]
    projected = {
        "source": {"files": ["p.parquet"], "format": "PARQUET"},
        "decoder": {"columns": {"columns": [{"name": "pair", "shape": [2]}]}},
        "pipeline": {"batchSize": 6},
    }
    with client.read(projected) as stream:
        batch = next(stream)
    assert list(batch) == ["pair"]
    assert batch["pair"].shape == (6, 2) and batch["pair"].dtype == np.int32
    np.testing.assert_array_equal(batch["pair"], [[i, -i] for i in range(6)])


def test_describe_types_the_columns_from_the_first_file(server, data_root: Path) -> None:
    """Before any reader opens: ``DescribeSpec`` reads the first file's footer, as a reader
    opening the spec would, and gives each column's dtype and shape (``-1`` where rows
    differ); a CSV spec's unnamed columns are named by the header line."""
    data = pa.table({
        "id": pa.array(range(6), pa.int64()),
        "pair": pa.array([[i, -i] for i in range(6)], pa.list_(pa.int32())),
        "score": pa.array([0.5] * 6, pa.float32()),
    })
    pq.write_table(data, data_root / "p.parquet")
    client = readerd.Client(server.addr)
    described = client.describe({"source": {"files": ["p.parquet"], "format": "PARQUET"},
                                 "pipeline": {"batchSize": 4}})  # fmt: skip
    assert described["batchSize"] == 4
    assert [(f["name"], f["kind"], f["dtype"], f["shape"]) for f in described["features"]] == [
        ("id", "DENSE", "INT64", []),
        ("pair", "RAGGED", "INT32", [-1]),
        ("score", "DENSE", "FLOAT32", []),
    ]
    (data_root / "h.csv").write_text("a,b\n1,2.5\n")
    csv = {"source": {"files": ["h.csv"], "format": "CSV", "header": True},
           "decoder": {"csv": {"columns": [{"dtype": "INT64"}, {"dtype": "FLOAT32"}]}}}  # fmt: skip
    assert [(f["name"], f["dtype"]) for f in client.describe(csv)["features"]] == [("a", "INT64"), ("b", "FLOAT32")]
    with pytest.raises(readerd.ReaderdError, match="missing.parquet"):
        client.describe({"source": {"files": ["missing.parquet"], "format": "PARQUET"}})


@pytest.mark.parametrize("pipeline", [
    {}, {"batchSize": 4}, {"batchSize": 4, "dropRemainder": True}, {"batchSize": 4, "numEpochs": 3},
    {"shard": {"count": 2, "index": 1}}, {"shard": {"count": 3, "index": 2}, "batchSize": 2},
    {"shuffle": {"bufferSize": 5}, "seed": 3, "numEpochs": 2, "batchSize": 5},
])  # fmt: skip
def test_the_element_count_described_is_what_the_stream_gives(server, data_root: Path, pipeline: dict) -> None:
    """Parquet (footers, two files) and fixed-length files (sizes): each spec's
    ``elementCount`` equals the elements a stream of it gives, through shards by file
    and by record, epochs, and batches that end at each epoch's end."""
    pq.write_table(pa.table({"id": pa.array(range(7), pa.int64())}), data_root / "a.parquet", row_group_size=3)
    pq.write_table(pa.table({"id": pa.array(range(7, 13), pa.int64())}), data_root / "b.parquet")
    (data_root / "r.bin").write_bytes(b"hh" + bytes(range(40)) + b"f")
    specs = [
        {"source": {"files": ["a.parquet", "b.parquet"], "format": "PARQUET"}, "pipeline": pipeline},
        {"source": {"files": ["r.bin"], "format": "FIXED_LENGTH", "recordBytes": 4, "headerBytes": 2, "footerBytes": 1},
         "pipeline": pipeline},
    ]  # fmt: skip
    client = readerd.Client(server.addr)
    for spec in specs:
        described = client.describe(spec)["elementCount"]
        with client.read(spec) as stream:
            given = sum(1 for _ in stream)
        assert described == given, (spec["source"]["format"], pipeline)


def test_an_element_count_not_known_before_reading_says_so(server, data_root: Path) -> None:
    pq.write_table(pa.table({"id": pa.array(range(4), pa.int64())}), data_root / "a.parquet")
    (data_root / "t.txt").write_text("a\nb\n")
    client = readerd.Client(server.addr)
    parquet = {"source": {"files": ["a.parquet"], "format": "PARQUET"}}
    assert client.describe({**parquet, "pipeline": {"numEpochs": -1}})["elementCount"] == -1  # endless
    assert client.describe({**parquet, "pipeline": {"select": {"skip": 1}}})["elementCount"] == -2
    assert client.describe({"source": {"files": ["t.txt"], "format": "TEXT_LINE"}})["elementCount"] == -2
    # More than 256 Parquet files: their footers are not all read to describe the spec.
    (data_root / "many").mkdir()
    for i in range(257):
        pq.write_table(pa.table({"id": pa.array([i], pa.int64())}), data_root / "many" / f"p{i:03}.parquet")
    many = {"source": {"files": ["many/*.parquet"], "format": "PARQUET"}}
    assert client.describe(many)["elementCount"] == -2
    assert client.describe({"source": {"files": ["many/p00*.parquet"], "format": "PARQUET"}})["elementCount"] == 10


def test_a_null_without_default_names_the_column_and_row(server, data_root: Path) -> None:
    pq.write_table(pa.table({"label": pa.array([1, None, 3], pa.int64())}), data_root / "n.parquet")
    bad = {"source": {"files": ["n.parquet"], "format": "PARQUET"}, "pipeline": {"batchSize": 3}}
    with pytest.raises(readerd.ReaderdError) as failed:
        with readerd.Client(server.addr).read(bad) as stream:
            list(stream)
    message = str(failed.value)
    assert "column label" in message and "n.parquet:1" in message and "INVALID_ARGUMENT" in message, message


def test_a_column_of_serialized_examples_decodes_with_parse_example(server, data_root: Path) -> None:
    """``source.column`` names the binary column whose values are the records, for the
    ``example`` decoder: the same tensors as the same Examples in a TFRecord file."""
    from readerd.tfrecord import example, write_tfrecord

    records = [example({"label": i, "x": [i * 0.5, -1.0]}) for i in range(20)]
    pq.write_table(pa.table({"id": list(range(20)), "record": pa.array(records, pa.binary())}),
                   data_root / "ex.parquet", row_group_size=6)
    write_tfrecord(data_root / "ex.tfrecord", records)
    features = {"label": {"fixedLen": {"dtype": "INT64", "shape": []}},
                "x": {"fixedLen": {"dtype": "FLOAT32", "shape": [2]}}}
    client = readerd.Client(server.addr)

    def read(source: dict) -> list[dict]:
        spec = {"source": source, "decoder": {"example": {"features": features}}, "pipeline": {"batchSize": 8}}
        with client.read(spec) as stream:
            return [{name: np.asarray(tensor).tolist() for name, tensor in batch.items()} for batch in stream]

    from_parquet = read({"files": ["ex.parquet"], "format": "PARQUET", "column": "record"})
    assert from_parquet == read({"files": ["ex.tfrecord"], "format": "TFRECORD"})
    assert [label for batch in from_parquet for label in batch["label"]] == list(range(20))
    with pytest.raises(readerd.ReaderdError, match="source.column"):
        read({"files": ["ex.parquet"], "format": "PARQUET"})


def test_parquet_mixes_with_csv(server, data_root: Path) -> None:
    """A mixture of a Parquet and a CSV dataset decoding to the same features."""
    pq.write_table(pa.table({"id": pa.array(range(30), pa.int64()), "score": pa.array([0.5] * 30, pa.float32())}),
                   data_root / "m.parquet", row_group_size=8)
    (data_root / "m.csv").write_text("id,score\n" + "".join(f"{100 + i},1.5\n" for i in range(10)))
    parquet = {"source": {"files": ["m.parquet"], "format": "PARQUET"}}
    csv = {"source": {"files": ["m.csv"], "format": "CSV", "header": True},
           "decoder": {"csv": {"columns": [{"dtype": "INT64"}, {"dtype": "FLOAT32"}]}}}
    spec = {"mix": {"datasets": [parquet, csv], "weights": [3, 1]}, "pipeline": {"batchSize": 5, "seed": 2}}
    keys, columns = served(readerd.Client(server.addr), spec)
    assert sorted(int(i) for i in columns["id"]) == list(range(30)) + list(range(100, 110))
    assert sum(key.startswith("0/m.parquet:") for key in keys) == 30
    assert {float(s) for s, i in zip(columns["score"], columns["id"]) if i >= 100} == {1.5}
