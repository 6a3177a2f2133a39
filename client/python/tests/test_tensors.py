"""The client delivers exactly the tensors ``readerctl read --output jsonl`` prints, for
every tensor kind the Flight plane lays out (dense, sparse, ragged, strings; batched
and not; TFRecord Examples, CSV, fixed-length raw records, undecoded records)."""

from __future__ import annotations

import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.flight as pa_flight
import pytest

import readerd
from helpers import bfloat16_as_float32, read_all, readerctl, tensor_json, write_spec
from readerd.tfrecord import example, write_tfrecord

NAN, INF = float("nan"), float("inf")


def examples(n: int) -> list[bytes]:
    records = []
    for i in range(n):
        features: dict = {
            "label": -(2**63) if i == 3 else i * 1000003,
            "x": [i * 0.1, [NAN, -0.0, INF, -INF, 1e-40, 3.4e38][i % 6]],
            "grid": [i, -i, 2 * i, 7],
            "tok": list(range(i % 4)),
            "name": b"\x00\xffn%d" % i,
            "span_lens": [i % 3, 1],
            "spans": [float(j) + 0.5 for j in range(i % 3 + 1)],
            "ix": [i % 10, (i * 7) % 10][: 1 + i % 2],
            "vals": [1.25, -2.5][: 1 + i % 2],
            "pt_lens": [1, i % 2],
            "pts": [float(i), 0.25, -1.0, 2.0][: 2 + 2 * (i % 2)],
            "q_lens": [1, i % 2, 2, 0],
            "qv": list(range(3 + i % 2)),
        }
        if i % 3:
            features["emb"] = [float(i)] * (2 * (i % 3))  # rows of 2; missing when i % 3 == 0
            features["words"] = [b"w%d" % j for j in range(i % 3)]
        records.append(example(features))
    return records


EXAMPLE_FEATURES = {
    "label": {"fixedLen": {"dtype": "INT64", "shape": []}},
    "x": {"fixedLen": {"dtype": "FLOAT32", "shape": [2]}},
    "grid": {"fixedLen": {"dtype": "INT64", "shape": [2, 2]}},
    "emb": {"fixedLenSequence": {"dtype": "FLOAT32", "shape": [2], "allowMissing": True}},
    "tok": {"varLen": {"dtype": "INT64"}},
    "words": {"varLen": {"dtype": "STRING"}},
    "name": {"fixedLen": {"dtype": "STRING", "shape": []}},
    "pairs": {"sparse": {"indexKeys": ["ix"], "valueKey": "vals", "dtype": "FLOAT32", "size": [10]}},
    "spans": {
        "ragged": {"dtype": "FLOAT32", "valueKey": "spans", "partitions": [{"rowLengths": "span_lens"}],
                   "rowSplitsDtype": "INT64"}
    },
    "pts": {
        "ragged": {"dtype": "FLOAT32", "valueKey": "pts",
                   "partitions": [{"rowLengths": "pt_lens"}, {"uniformRowLength": 2}], "rowSplitsDtype": "INT32"}
    },
    # Two innermost uniform partitions: flat values [n, 2, 1], static shape [B, None, None, 2, 1].
    "cube": {
        "ragged": {"dtype": "FLOAT32", "valueKey": "pts", "rowSplitsDtype": "INT64",
                   "partitions": [{"rowLengths": "pt_lens"}, {"uniformRowLength": 2}, {"uniformRowLength": 1}]}
    },
    # A uniform partition outside a ragged one keeps its splits: static shape [B, None, 2, None].
    "quads": {
        "ragged": {"dtype": "INT64", "valueKey": "qv", "rowSplitsDtype": "INT64",
                   "partitions": [{"uniformRowLength": 2}, {"rowLengths": "q_lens"}]}
    },
}  # fmt: skip


def raw_records(n: int) -> bytes:
    """A FIXED_LENGTH file: a 4-byte header, then ``n`` records of 8 bytes."""
    body = b"".join(struct.pack("<ff", i * 1.5, -i / 3) for i in range(n))
    return b"HEAD" + body


def specs() -> dict[str, dict]:
    example_spec = {"source": {"files": ["ex.tfrecord"], "format": "TFRECORD"},
                    "decoder": {"example": {"features": EXAMPLE_FEATURES}}}  # fmt: skip
    csv_decoder = {"csv": {"columns": [
        {"dtype": "INT64"},
        {"dtype": "FLOAT32", "default": {"floatValues": [0.5]}},
        {"dtype": "STRING", "default": {"bytesValues": [""]}},
        {"name": "flag", "dtype": "INT32", "default": {"int64Values": [7]}},
    ]}}  # fmt: skip
    raw = {"source": {"files": ["raw.bin"], "format": "FIXED_LENGTH", "headerBytes": 4, "recordBytes": 8}}
    out = {
        "example_unbatched": example_spec,
        "example_batched": {**example_spec, "pipeline": {"batchSize": 4}},
        "example_batched_shuffled": {**example_spec, "pipeline": {"batchSize": 3, "seed": 7,
                                                                  "shuffle": {"bufferSize": 5}}},
        "csv_header_batched": {"source": {"files": ["table.csv"], "format": "CSV", "header": True},
                               "decoder": csv_decoder, "pipeline": {"batchSize": 3}},
        "csv_lines_unbatched": {"source": {"files": ["table.csv"], "format": "TEXT_LINE", "skipHeaderLines": 1},
                                "decoder": csv_decoder},
        "records_undecoded": {"source": {"files": ["ex.tfrecord"], "format": "TFRECORD"},
                              "pipeline": {"batchSize": 5}},
        "lines_undecoded": {"source": {"files": ["table.csv"], "format": "TEXT_LINE"}},
    }  # fmt: skip
    for out_type, little_endian in [("FLOAT32", True), ("FLOAT16", True), ("BFLOAT16", True), ("INT16", False),
                                    ("UINT8", True), ("INT8", True), ("UINT16", True), ("INT32", True),
                                    ("INT64", True), ("FLOAT64", True), ("COMPLEX64", True)]:  # fmt: skip
        decoder = {"raw": {"outType": out_type, "littleEndian": little_endian}}
        out[f"raw_{out_type.lower()}"] = {**raw, "decoder": decoder}
        out[f"raw_{out_type.lower()}_batched"] = {**raw, "decoder": decoder, "pipeline": {"batchSize": 4}}
    out["raw_bool"] = {"source": {"files": ["bits.bin"], "format": "FIXED_LENGTH", "recordBytes": 3},
                       "decoder": {"raw": {"outType": "BOOL"}}, "pipeline": {"batchSize": 2}}  # fmt: skip
    return out


def write_data(root: Path) -> None:
    write_tfrecord(root / "ex.tfrecord", examples(11))
    (root / "table.csv").write_text(
        'id,price,city,flag\n1,2.5,"a,b",\n2,-0.0,x,3\n3,,"q""uote",-4\n4,nan,,5\n5,1e-3,y,\n6,inf,z,0\n7,3,w,1\n'
    )
    (root / "raw.bin").write_bytes(raw_records(10))
    (root / "bits.bin").write_bytes(bytes([0, 1, 1, 1, 0, 0, 1, 1, 1]))


def read_all_flight(addr: str, spec: dict) -> list[dict]:
    """Every element of a plain pyarrow Flight ``DoGet``, decoded by ``readerd.decode_batch``."""
    ticket = pa_flight.Ticket(json.dumps({"spec": spec}).encode())
    reader = pa_flight.connect(f"grpc://{addr}").do_get(ticket)
    batched = reader.schema.metadata[b"readerd.batched"] == b"true"
    out = []
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        if chunk.data is None:
            continue
        metadata = json.loads(chunk.app_metadata.to_pybytes())
        if "seq" not in metadata:
            continue  # a batch of 0 rows carrying only a checkpoint
        tensors = readerd.decode_batch(chunk.data, metadata.get("shapes", {}), batched)
        features = {name: tensor_json(t) for name, t in tensors.items()}
        out.append({"seq": metadata["seq"], "keys": metadata["keys"], "features": features})
    return json.loads(json.dumps(out))


@pytest.mark.parametrize("plane", ["native", "flight"])
@pytest.mark.parametrize("name", sorted(specs()))
def test_same_tensors_as_readerctl(server, data_root: Path, tmp_path: Path, name: str, plane: str) -> None:
    """The native client's tensors, and plain pyarrow's through ``decode_batch``, are
    readerctl's."""
    write_data(data_root)
    spec = specs()[name]
    lines = readerctl(server, write_spec(tmp_path, name, spec))
    assert lines[-1].get("end_of_sequence") is True, lines[-1]
    expected = bfloat16_as_float32([line for line in lines if "features" in line])
    assert expected, "readerctl printed no element"
    got = read_all(readerd.Client(server.addr), spec) if plane == "native" else read_all_flight(server.addr, spec)
    assert len(got) == len(expected)
    for ours, theirs in zip(got, expected):
        assert ours == theirs


def test_zero_copy_numeric_tensors(server, data_root: Path) -> None:
    """Numeric dense tensors are read-only views of the received buffers (numpy owns no
    data: the base is the native client's buffer)."""
    write_data(data_root)
    with readerd.Client(server.addr).read(specs()["example_batched"]) as stream:
        batch = next(stream)
        assert stream.seq == 0 and len(stream.keys) == 4
    assert batch["x"].shape == (4, 2) and batch["x"].dtype.name == "float32"
    assert batch["grid"].shape == (4, 2, 2)
    for name in ("x", "grid", "label", "emb"):
        assert not batch[name].flags.writeable and not batch[name].flags.owndata, name
    assert isinstance(batch["tok"], readerd.Sparse) and isinstance(batch["spans"], readerd.Ragged)
    assert batch["pts"].flat_values.shape[1:] == (2,) and batch["pts"].nested_row_splits[0].dtype.name == "int32"


def test_ragged_static_shapes(server, data_root: Path) -> None:
    """Ragged tensors carry TensorFlow's static shape; uniform inner dimensions are
    numpy dimensions of the flat values, a uniform outer partition keeps its splits."""
    write_data(data_root)
    with readerd.Client(server.addr).read(specs()["example_batched"]) as stream:
        batch = next(stream)
    assert batch["spans"].shape == (4, None, None) and batch["spans"].ragged_rank == 2
    assert batch["pts"].shape == (4, None, None, 2) and batch["pts"].flat_values.shape == (6, 2)
    cube = batch["cube"]
    assert cube.shape == (4, None, None, 2, 1) and cube.ragged_rank == 2 and cube.flat_values.shape == (6, 2, 1)
    quads = batch["quads"]
    assert quads.shape == (4, None, 2, None) and quads.ragged_rank == 3
    assert [s.tolist() for s in quads.nested_row_splits[:2]] == [[0, 2, 4, 6, 8], [0, 2, 4, 6, 8, 10, 12, 14, 16]]
    with readerd.Client(server.addr).read(specs()["example_unbatched"]) as stream:
        first = next(stream)
    assert first["quads"].shape == (2, 2, None) and first["quads"].ragged_rank == 2
    assert first["cube"].shape == (2, None, 2, 1) and first["cube"].flat_values.shape == (1, 2, 1)


def test_ragged_columns_for_any_arrow_client(server, data_root: Path) -> None:
    """Plain pyarrow sees uniform dimensions as fixed-size lists, ragged ones as lists."""
    write_data(data_root)
    ticket = pa_flight.Ticket(json.dumps({"spec": specs()["example_batched"]}).encode())
    reader = pa_flight.connect(f"grpc://{server.addr}").do_get(ticket)
    schema = reader.schema
    assert schema.field("quads").type == pa.large_list(
        pa.field("item", pa.list_(pa.field("item", pa.large_list(pa.field("item", pa.int64(), False)), False), 2),
                 False))  # fmt: skip
    assert schema.field("cube").type.value_type.value_type == pa.list_(
        pa.field("item", pa.list_(pa.field("item", pa.float32(), False), 1), False), 2)  # fmt: skip
    assert schema.field("quads").metadata[b"readerd.ragged_rank"] == b"3"
    chunk = reader.read_chunk()
    assert json.loads(chunk.app_metadata.to_pybytes())["shapes"]["quads"] == [4, None, 2, None]
    assert chunk.data.column("quads").to_pylist()[1] == [[[0], [1]], [[2, 3], []]]


def test_strings_are_views_of_the_received_bytes(server, data_root: Path) -> None:
    """A STRING tensor is a ``readerd.Strings``: bytes on demand, zero-copy ``uint8`` views,
    lengths, nested lists and object arrays, all of the same values."""
    write_data(data_root)
    with readerd.Client(server.addr).read(specs()["example_batched"]) as stream:
        batch = next(stream)
    names = batch["name"]
    expected = [b"\x00\xffn%d" % i for i in range(4)]
    assert isinstance(names, readerd.Strings) and names.shape == (4,) and names.ndim == 1 and len(names) == 4
    assert [names[i] for i in range(4)] == expected and names[-1] == expected[3] and list(names) == expected
    assert names.tolist() == expected and np.asarray(names).tolist() == expected
    assert names.lengths.tolist() == [len(v) for v in expected] and names.nbytes == sum(map(len, expected))
    view = names.view(1)
    assert view.dtype == np.uint8 and view.tobytes() == expected[1]
    assert not view.flags.writeable and not view.flags.owndata
    with pytest.raises(IndexError):
        names[4]
    with pytest.raises(IndexError):
        names.view(4)
    words = batch["words"].values  # a sparse tensor's values: Strings too
    assert isinstance(words, readerd.Strings) and words.tolist() == [b"w0", b"w0", b"w1"]
    # One buffer and offsets, Arrow's layout: value i is values[offsets[i]:offsets[i + 1]].
    values, offsets = names.values, names.offsets
    assert values.dtype == np.uint8 and values.tobytes() == b"".join(expected)
    assert offsets.dtype == np.int64 and offsets.tolist() == [0, 4, 8, 12, 16]
    assert [values[offsets[i]:offsets[i + 1]].tobytes() for i in range(4)] == expected
    assert not values.flags.writeable and names.values.ctypes.data == values.ctypes.data  # joined once, kept
    assert names.matrix().shape == (4, 4) and names.matrix()[2].tobytes() == expected[2]
    # Pickled as DataLoader workers send items: the same values, shape and layout.
    copied = pickle.loads(pickle.dumps(names))
    assert isinstance(copied, readerd.Strings) and copied.shape == (4,) and copied.tolist() == expected
    assert copied.offsets.tolist() == names.offsets.tolist() and copied.view(3).tobytes() == expected[3]
    with pytest.raises(ValueError, match="value 0 has 18 bytes, value 1 has 12"):
        _uneven(server.addr).matrix()


def _uneven(addr: str) -> "readerd.Strings":
    """The first batch of undecoded lines of table.csv: 18 and 12 bytes."""
    spec = {"source": {"files": ["table.csv"], "format": "TEXT_LINE"}, "pipeline": {"batchSize": 2}}
    with readerd.Client(addr).read(spec) as stream:
        return next(stream)["value"]


def test_fixed_length_records_as_a_uint8_matrix(server, data_root: Path) -> None:
    """Undecoded FIXED_LENGTH records, batched: ``matrix()`` is a [batch, recordBytes]
    ``uint8`` array of the records' bytes, as ``tf.io.decode_raw(records, tf.uint8)`` gives."""
    write_data(data_root)
    spec = {"source": {"files": ["raw.bin"], "format": "FIXED_LENGTH", "headerBytes": 4, "recordBytes": 8},
            "pipeline": {"batchSize": 4}}  # fmt: skip
    body = raw_records(10)[4:]
    with readerd.Client(server.addr).read(spec) as stream:
        matrices = [batch["value"].matrix() for batch in stream]
    assert [m.shape for m in matrices] == [(4, 8), (4, 8), (2, 8)]
    assert all(m.dtype == np.uint8 and not m.flags.writeable for m in matrices)
    assert b"".join(m.tobytes() for m in matrices) == body
