#!/usr/bin/env python3
"""Records the `pse_context_sparse_*` golden cases: a SparseFeature among a
SequenceExample's context features, which TensorFlow's Python layer refuses
(`_ParseOpParams.from_features` takes VarLen, FixedLen and Ragged context features),
by `tf.io.parse_single_sequence_example` and by `tf.io.parse_sequence_example`.

Not run in CI. To re-record (from the repository root):

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 numpy==2.4.6
    /tmp/tfvenv/bin/python tests/golden/record_context_sparse.py

It writes `cases/parse_sequence_example/pse_context_sparse_*.json` in the schema of
README.md and puts the cases into `cases/index.json` (replacing earlier entries of the
prefix).
"""

import base64
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from golden_index import replace_cases  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CATEGORY = "parse_sequence_example"
PREFIX = "pse_context_sparse_"
GENERATOR = {
    "holdout": False,
    "numpy_version": np.__version__,
    "schema_version": 1,
    "seed": 0,
    "tensorflow_version": tf.__version__,
}


def sequence_example():
    example = tf.train.SequenceExample()
    example.context.feature["ix"].int64_list.value.extend([1, 4])
    example.context.feature["vx"].float_list.value.extend([0.5, 2.0])
    steps = example.feature_lists.feature_list["tok"]
    for step in ([1, 2], [3]):
        steps.feature.add().int64_list.value.extend(step)
    return example


def sparse_json(feature):
    return {
        "already_sorted": feature.already_sorted,
        "dtype": feature.dtype.name,
        "index_key": feature.index_key,
        "size": feature.size,
        "type": "SparseFeature",
        "value_key": feature.value_key,
    }


def record(case_id, description, context, batched):
    serialized = sequence_example().SerializeToString()
    sequence = {"tok": tf.io.VarLenFeature(tf.int64)}
    try:
        if batched:
            tf.io.parse_sequence_example(tf.constant([serialized]), context, sequence)
        else:
            tf.io.parse_single_sequence_example(tf.constant(serialized), context, sequence)
        raise SystemExit(f"{case_id}: TensorFlow accepted a context SparseFeature")
    except ValueError as err:
        message = str(err)
        expected = {
            "error": {"class": type(err).__name__, "message": message, "message_core": message, "python_level": True},
            "status": "error",
        }
    op = "tf.io.parse_sequence_example" if batched else "tf.io.parse_single_sequence_example"
    case = {
        "category": CATEGORY,
        "description": description,
        "expected": expected,
        "generator": GENERATOR,
        "id": case_id,
        "inputs": {
            "context_features": {
                key: sparse_json(f) if isinstance(f, tf.io.SparseFeature) else {"dtype": f.dtype.name, "type": "VarLenFeature"}
                for key, f in context.items()
            },
            "sequence_features": {"tok": {"dtype": "int64", "type": "VarLenFeature"}},
            "serialized": [base64.b64encode(serialized).decode("ascii")],
            "serialized_shape": [1] if batched else [],
        },
        "op": op,
        "schema_version": 1,
        "tf_call": f"{op}(serialized, context_features, sequence_features)",
    }
    path = os.path.join(HERE, "cases", CATEGORY, case_id + ".json")
    with open(path, "w") as fh:
        fh.write(json.dumps(case, indent=1, sort_keys=True) + "\n")
    return {"category": CATEGORY, "file": f"cases/{CATEGORY}/{case_id}.json", "id": case_id, "op": op,
            "status": case["expected"]["status"]}


def main():
    sparse = tf.io.SparseFeature(index_key="ix", value_key="vx", dtype=tf.float32, size=10)
    two_keys = tf.io.SparseFeature(index_key=["ix", "jx"], value_key="vx", dtype=tf.float64, size=[10, 4],
                                   already_sorted=True)
    entries = [
        record(PREFIX + "single", "A SparseFeature among the context features -> Python-level error.",
               {"cx": sparse}, batched=False),
        record(PREFIX + "batch_sorted_keys", "batch: two SparseFeatures beside a VarLen one; the first by key is "
               "named.", {"zx": sparse, "cy": two_keys, "a": tf.io.VarLenFeature(tf.int64)}, batched=True),
    ]
    replace_cases(PREFIX, entries)


if __name__ == "__main__":
    main()
