"""What the golden recorders share (tests/golden/record_*.py): putting a recorder's
cases into `cases/index.json`, and a float as the cases' JSON writes it."""

import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def replace_cases(prefix, entries):
    """Puts `entries` into `cases/index.json` in place of the earlier cases whose id starts
    with `prefix`, and prints each case's id and status."""
    index_path = os.path.join(HERE, "cases", "index.json")
    with open(index_path) as fh:
        index = json.load(fh)
    index["cases"] = [c for c in index["cases"] if not c["id"].startswith(prefix)] + entries
    with open(index_path, "w") as fh:
        fh.write(json.dumps(index, indent=1, sort_keys=True) + "\n")
    for e in entries:
        print(e["id"], e["status"])


def float_json(x):
    """A float as the cases hold it: a JSON number, or "nan", "inf", "-inf", "-0.0"."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0.0 and math.copysign(1.0, x) < 0:
        return "-0.0"
    return x
