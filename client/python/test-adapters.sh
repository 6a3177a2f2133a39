#!/usr/bin/env bash
# The framework adapters' tests, readerd.tf (tests/test_tf.py) and readerd.torch
# (tests/test_torch.py), in a venv of their own with tensorflow-cpu and torch.
#
# Not part of .ci/run: PyPI's torch brings about 3 GB of CUDA libraries (no CPU-only
# index is reachable here) and the two frameworks take minutes to install. Everything
# the adapters do without a framework (worker shards, Strings pickling) is tested in
# .ci/run (tests/test_shards.py, tests/test_tensors.py).
#
#   bash client/python/test-adapters.sh            # venv in target/adapters-venv
#   READERD_ADAPTERS_VENV=/tmp/v bash client/python/test-adapters.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="${READERD_ADAPTERS_VENV:-target/adapters-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# One framework per install: pip's resolver backtracks for long over both at once.
"$venv/bin/pip" install --quiet tensorflow-cpu
"$venv/bin/pip" install --quiet torch
"$venv/bin/pip" install --quiet -r client/python/requirements-test.txt
"$venv/bin/pip" install --quiet --force-reinstall --no-deps ./client/python

# The tests start target/debug/readerd and readerctl.
cargo build --quiet -p readerd-server -p readerd-client
# Apart: DataLoader workers are forked, and a process that imported TensorFlow forks badly.
"$venv/bin/python" -m pytest -q -p no:cacheprovider client/python/tests/test_tf.py
"$venv/bin/python" -m pytest -q -p no:cacheprovider client/python/tests/test_torch.py
