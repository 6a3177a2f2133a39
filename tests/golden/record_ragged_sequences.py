#!/usr/bin/env python3
"""Records the `pse_ragged_*` golden cases: RaggedFeatures in a SequenceExample's
feature lists with UniformRowLength partitions, alone and under or over keyed
partitions, parsed by real TensorFlow (`tf.io.parse_sequence_example` on a batch,
`tf.io.parse_single_sequence_example` on one record).

Not run in CI. To re-record (from the repository root):

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 numpy==2.4.6
    /tmp/tfvenv/bin/python tests/golden/record_ragged_sequences.py

It writes `cases/parse_sequence_example/pse_ragged_*.json` in the schema of README.md and
puts the cases into `cases/index.json` (replacing earlier `pse_ragged_*` entries).
Deterministic: seeded values, sorted keys.
"""

import base64
import json
import math
import os
import re
import struct

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from golden_index import float_json, replace_cases  # noqa: E402

SEED = 20240607
HERE = os.path.dirname(os.path.abspath(__file__))
CATEGORY = "parse_sequence_example"
PREFIX = "pse_ragged_"
GENERATOR = {
    "holdout": False,
    "numpy_version": np.__version__,
    "schema_version": 1,
    "seed": SEED,
    "tensorflow_version": tf.__version__,
}

rng = np.random.RandomState(SEED)


def b64(raw):
    return base64.b64encode(raw).decode("ascii")


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def dense_json(t):
    t = tf.convert_to_tensor(t)
    dtype = t.dtype.name
    flat = t.numpy().reshape(-1).tolist()
    if dtype == "string":
        values = [b64(v) for v in flat]
    elif dtype.startswith("float"):
        values = [float_json(v) for v in flat]
    else:
        values = [int(v) for v in flat]
    return {"kind": "dense", "dtype": dtype, "shape": list(t.shape), "values": values}


def tensor_json(t):
    if isinstance(t, tf.RaggedTensor):
        return {
            "kind": "ragged",
            "dtype": t.dtype.name,
            "ragged_rank": t.ragged_rank,
            "shape": [d for d in t.shape.as_list()],
            "flat_values": dense_json(t.flat_values),
            "nested_row_splits": [dense_json(s) for s in t.nested_row_splits],
        }
    if isinstance(t, tf.SparseTensor):
        return {
            "kind": "sparse",
            "dtype": t.dtype.name,
            "indices": dense_json(t.indices),
            "values": dense_json(t.values),
            "dense_shape": dense_json(t.dense_shape),
        }
    return dense_json(t)


# Features of one step: ("int64", [1, 2]) | ("float32", [...]) | ("string", [b"..."]).
def feature_proto(dtype, values):
    if dtype == "int64":
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    if dtype == "float32":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def feature_desc(dtype, values):
    if dtype == "int64":
        return {"int64_list": [int(v) for v in values]}
    if dtype == "float32":
        return {"float_list": [float_json(f32(v)) for v in values]}
    return {"bytes_list": [b64(v) for v in values]}


def sequence_example(lists):
    """lists: {name: (dtype, [step values, ...])}; a name absent = no feature list."""
    ex = tf.train.SequenceExample()
    desc = {"context": {}, "feature_lists": {}}
    for name, (dtype, steps) in sorted(lists.items()):
        fl = ex.feature_lists.feature_list[name]
        desc["feature_lists"][name] = []
        for step in steps:
            fl.feature.append(feature_proto(dtype, step))
            desc["feature_lists"][name].append(feature_desc(dtype, step))
    return ex.SerializeToString(deterministic=True), desc


def make_spec(dtype, value_key, partitions, row_splits_dtype="int64", validate=False):
    tf_partitions = []
    desc = []
    for p in partitions:
        kind, arg = p
        if kind == "UniformRowLength":
            tf_partitions.append(tf.io.RaggedFeature.UniformRowLength(arg))
            desc.append({"type": kind, "length": arg})
        else:
            tf_partitions.append(getattr(tf.io.RaggedFeature, kind)(arg))
            desc.append({"type": kind, "key": arg})
    feature = tf.io.RaggedFeature(
        dtype=tf.as_dtype(dtype),
        value_key=value_key,
        partitions=tuple(tf_partitions),
        row_splits_dtype=tf.as_dtype(row_splits_dtype),
        validate=validate,
    )
    spec = {
        "type": "RaggedFeature",
        "dtype": dtype,
        "value_key": value_key,
        "partitions": desc,
        "row_splits_dtype": row_splits_dtype,
        "validate": validate,
    }
    return feature, spec


def error_json(err):
    message = err.message if hasattr(err, "message") else str(err)
    core = re.sub(r"^\{\{function_node [^}]*\}\} ", "", message)
    core = re.sub(r" \[Op:[^\]]*\].*$", "", core, flags=re.S)
    return {"class": type(err).__name__, "message": message, "message_core": core}


def record(case_id, description, records, sequence_features, batched):
    """records: list of {name: (dtype, steps)}; sequence_features: {name: (feature, spec)}."""
    serialized, descs = zip(*(sequence_example(r) for r in records))
    features = {name: f for name, (f, _) in sequence_features.items()}
    specs = {name: s for name, (_, s) in sequence_features.items()}
    if batched:
        op = "tf.io.parse_sequence_example"
        call = "tf.io.parse_sequence_example(serialized, context_features, sequence_features)"
        shape = [len(serialized)]
    else:
        assert len(serialized) == 1
        op = "tf.io.parse_single_sequence_example"
        call = "tf.io.parse_single_sequence_example(serialized, context_features, sequence_features)"
        shape = []
    try:
        if batched:
            context, lists, lengths = tf.io.parse_sequence_example(
                tf.constant(list(serialized)), context_features={}, sequence_features=features
            )
            output = {
                "context": {k: tensor_json(v) for k, v in context.items()},
                "feature_lists": {k: tensor_json(v) for k, v in lists.items()},
                "lengths": {k: tensor_json(v) for k, v in lengths.items()},
            }
        else:
            context, lists = tf.io.parse_single_sequence_example(
                tf.constant(serialized[0]), context_features={}, sequence_features=features
            )
            output = {
                "context": {k: tensor_json(v) for k, v in context.items()},
                "feature_lists": {k: tensor_json(v) for k, v in lists.items()},
            }
        expected = {"status": "ok", "output": output}
    except (tf.errors.OpError, ValueError, TypeError) as err:
        expected = {"status": "error", "error": error_json(err)}
        if not isinstance(err, tf.errors.OpError):
            expected["error"]["python_level"] = True
    case = {
        "schema_version": 1,
        "id": case_id,
        "category": CATEGORY,
        "op": op,
        "description": description,
        "tf_call": call,
        "inputs": {
            "serialized": [b64(s) for s in serialized],
            "serialized_shape": shape,
            "sequence_examples": list(descs),
            "context_features": {},
            "sequence_features": specs,
        },
        "expected": expected,
        "generator": GENERATOR,
    }
    path = os.path.join(HERE, "cases", CATEGORY, case_id + ".json")
    with open(path, "w") as f:
        f.write(json.dumps(case, indent=1, sort_keys=True) + "\n")
    return {
        "category": CATEGORY,
        "file": "cases/%s/%s.json" % (CATEGORY, case_id),
        "id": case_id,
        "op": op,
        "status": expected["status"],
    }


def ints(n):
    return [int(v) for v in rng.randint(-100, 100, size=n)]


def floats(n):
    return [f32(v) for v in rng.standard_normal(n)]


def strings(n):
    return [("s%d" % v).encode() for v in rng.randint(0, 1000, size=n)]


def steps_of(make, counts):
    return [make(c) for c in counts]


def main():
    entries = []
    uniform = lambda n: ("UniformRowLength", n)  # noqa: E731

    # The example: steps [x] and [y, z], a length of 1.
    f = make_spec("int64", "v", [uniform(1)])
    entries.append(record(
        PREFIX + "uniform_single_issue", "single: steps [x], [y, z], UniformRowLength(1) -> [2, None, 1].",
        [{"v": ("int64", steps_of(ints, [1, 2]))}], {"r": f}, batched=False))

    f = make_spec("float32", "v", [uniform(2)], row_splits_dtype="int32")
    entries.append(record(
        PREFIX + "uniform_single_float_int32", "single: float steps of 2, 4, 0, 2 values, UniformRowLength(2), "
        "int32 row splits.",
        [{"v": ("float32", steps_of(floats, [2, 4, 0, 2]))}], {"r": f}, batched=False))

    f = make_spec("string", "v", [uniform(2)])
    entries.append(record(
        PREFIX + "uniform_batch_bytes", "batch: bytes steps, UniformRowLength(2); a record without the list, "
        "one with an empty list, one with an empty step.",
        [{"v": ("string", steps_of(strings, [2, 4]))}, {}, {"v": ("string", [])},
         {"v": ("string", steps_of(strings, [0, 2, 2]))}], {"r": f}, batched=True))

    # 14 steps, every step a multiple of 3 values: the partition is inside the steps.
    f = make_spec("int64", "v", [uniform(3)])
    entries.append(record(
        PREFIX + "uniform_batch_14_steps", "batch: 14 steps of 0, 3 or 6 int64 values, UniformRowLength(3) "
        "(the step count is no multiple of 3).",
        [{"v": ("int64", steps_of(ints, [3, 6, 0, 3, 3]))}, {"v": ("int64", steps_of(ints, [3, 3, 3, 0]))},
         {"v": ("int64", steps_of(ints, [6, 3, 3, 3, 0]))}], {"r": f}, batched=True))

    # Steps that are no multiple, a total that is: TensorFlow reshapes all values at once.
    f = make_spec("float32", "v", [uniform(3)])
    entries.append(record(
        PREFIX + "uniform_batch_total_multiple", "batch: steps of 1, 2 and 3 values, UniformRowLength(3): only "
        "the total must be a multiple.",
        [{"v": ("float32", steps_of(floats, [1, 2]))}, {"v": ("float32", steps_of(floats, [3]))}], {"r": f},
        batched=True))

    f = make_spec("int64", "v", [uniform(3)])
    entries.append(record(
        PREFIX + "uniform_batch_not_multiple", "batch: 14 values in all, UniformRowLength(3) -> error.",
        [{"v": ("int64", steps_of(ints, [3, 6]))}, {"v": ("int64", steps_of(ints, [3, 2]))}], {"r": f},
        batched=True))

    f = make_spec("string", "v", [uniform(2)])
    entries.append(record(
        PREFIX + "uniform_single_not_multiple", "single: 3 bytes values, UniformRowLength(2) -> error.",
        [{"v": ("string", steps_of(strings, [2, 1]))}], {"r": f}, batched=False))

    # [RowLengths, UniformRowLength]: pairs of values, grouped by the lengths of each step.
    f = make_spec("int64", "v", [("RowLengths", "lens"), uniform(2)])
    entries.append(record(
        PREFIX + "lengths_uniform_batch", "batch: partitions [RowLengths('lens'), UniformRowLength(2)].",
        [{"v": ("int64", steps_of(ints, [6, 2])), "lens": ("int64", [[1, 2], [0, 1]])},
         {"v": ("int64", [[]]), "lens": ("int64", [[]])},
         {"v": ("int64", steps_of(ints, [4])), "lens": ("int64", [[2]])}], {"r": f}, batched=True))

    f = make_spec("float32", "v", [("RowLengths", "lens"), uniform(2)], validate=True)
    entries.append(record(
        PREFIX + "lengths_uniform_single", "single: partitions [RowLengths('lens'), UniformRowLength(2)], "
        "validate.",
        [{"v": ("float32", steps_of(floats, [6, 0, 2])), "lens": ("int64", [[1, 2], [], [0, 1]])}], {"r": f},
        batched=False))

    # [UniformRowLength, RowSplits]: rows of each step by row splits, then rows in pairs.
    f = make_spec("string", "v", [uniform(2), ("RowSplits", "splits")])
    entries.append(record(
        PREFIX + "uniform_splits_batch", "batch: partitions [UniformRowLength(2), RowSplits('splits')].",
        [{"v": ("string", steps_of(strings, [3, 2])), "splits": ("int64", [[0, 1, 1, 3], [0, 2, 2]])},
         {"v": ("string", steps_of(strings, [4])), "splits": ("int64", [[0, 1, 2, 4]])}], {"r": f},
        batched=True))

    # Rows no multiple of the uniform length: TensorFlow keeps nrows // length rows of it
    # (validate=False), or refuses in Python (validate=True).
    f = make_spec("string", "v", [uniform(2), ("RowSplits", "splits")])
    entries.append(record(
        PREFIX + "uniform_splits_rows_not_multiple", "batch: [UniformRowLength(2), RowSplits('splits')] over 9 "
        "rows in all, no validation.",
        [{"v": ("string", steps_of(strings, [3, 2])), "splits": ("int64", [[0, 1, 1, 3], [0, 2, 2]])},
         {"v": ("string", steps_of(strings, [4])), "splits": ("int64", [[0, 1, 2, 3, 4]])}], {"r": f},
        batched=True))

    f = make_spec("int64", "v", [uniform(2), ("RowSplits", "splits")], validate=True)
    entries.append(record(
        PREFIX + "uniform_splits_rows_not_multiple_validate", "single: [UniformRowLength(2), RowSplits('splits')] "
        "over 5 rows, validate -> error.",
        [{"v": ("int64", steps_of(ints, [3, 1])), "splits": ("int64", [[0, 2, 2, 3], [0, 0, 1]])}], {"r": f},
        batched=False))

    f = make_spec("int64", "v", [uniform(2), ("RowSplits", "splits")], row_splits_dtype="int32", validate=True)
    entries.append(record(
        PREFIX + "uniform_splits_single", "single: partitions [UniformRowLength(2), RowSplits('splits')], int32 "
        "row splits, validate.",
        [{"v": ("int64", steps_of(ints, [3, 1])), "splits": ("int64", [[0, 2, 2, 3], [0, 0, 1, 1]])}], {"r": f},
        batched=False))

    f = make_spec("float32", "v", [("RowStarts", "starts"), uniform(2)])
    entries.append(record(
        PREFIX + "starts_uniform_batch", "batch: partitions [RowStarts('starts'), UniformRowLength(2)].",
        [{"v": ("float32", steps_of(floats, [4, 2])), "starts": ("int64", [[0, 1], [0]])},
         {"v": ("float32", steps_of(floats, [6])), "starts": ("int64", [[0, 0, 2]])}], {"r": f}, batched=True))

    f = make_spec("int64", "v", [("RowLimits", "limits"), uniform(1)])
    entries.append(record(
        PREFIX + "limits_uniform_single", "single: partitions [RowLimits('limits'), UniformRowLength(1)].",
        [{"v": ("int64", steps_of(ints, [3, 2])), "limits": ("int64", [[1, 3], [2]])}], {"r": f}, batched=False))

    f = make_spec("string", "v", [("ValueRowIds", "ids"), uniform(2)])
    entries.append(record(
        PREFIX + "rowids_uniform_batch", "batch: partitions [ValueRowIds('ids'), UniformRowLength(2)].",
        [{"v": ("string", steps_of(strings, [6, 2])), "ids": ("int64", [[0, 2, 2], [1]])},
         {"v": ("string", steps_of(strings, [2])), "ids": ("int64", [[0]])}], {"r": f}, batched=True))

    f = make_spec("int64", "v", [("RowLengths", "lens")])
    entries.append(record(
        PREFIX + "lengths_batch", "batch: partitions [RowLengths('lens')] alone.",
        [{"v": ("int64", steps_of(ints, [3, 0])), "lens": ("int64", [[1, 2], []])},
         {"v": ("int64", steps_of(ints, [2])), "lens": ("int64", [[0, 2, 0]])}], {"r": f}, batched=True))

    # Two features: one over another's partition key, and both over the same values.
    f1 = make_spec("int64", "v", [uniform(2)])
    f2 = make_spec("int64", "v", [("RowLengths", "lens"), uniform(2)])
    entries.append(record(
        PREFIX + "two_features_batch", "batch: two features over the same values, [UniformRowLength(2)] and "
        "[RowLengths('lens'), UniformRowLength(2)].",
        [{"v": ("int64", steps_of(ints, [4, 2])), "lens": ("int64", [[2], [1]])},
         {"v": ("int64", steps_of(ints, [2])), "lens": ("int64", [[1]])}], {"a": f1, "b": f2}, batched=True))

    # validate=True with partitions of other steps than the values.
    f = make_spec("int64", "v", [("RowLengths", "lens"), uniform(1)], validate=True)
    entries.append(record(
        PREFIX + "lengths_misaligned_validate", "batch, validate: the partition's feature list has other steps "
        "than the values' -> error.",
        [{"v": ("int64", steps_of(ints, [1, 2])), "lens": ("int64", [[1, 2]])}], {"r": f}, batched=True))

    replace_cases(PREFIX, entries)


if __name__ == "__main__":
    main()
