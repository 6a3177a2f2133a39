#!/usr/bin/env bash
# readerd against tf.data service on the same files, same machine, one run.
#
#   [EPOCHS=40] bench/compare.sh DATA_DIR [SECONDS]
#
# DATA_DIR: written by ../shared/tfdata-bench/gen_data.py --out DATA_DIR (needs
# tensorflow-cpu, as does the tf.data service run). The script writes readerd specs for
# those files (`readerctl gen-demo --specs-only`: batch 256, cycleLength 2, and EPOCHS
# epochs, 40 by default, so that one consumer reads for seconds as tf.data's 10 do,
# not for under one second where one busy moment of the machine is the whole figure),
# runs the harness's tf.data service cases (parallel_epochs, compression AUTO and NONE),
# then `readerctl bench` (1 and 4 consumers) against a release readerd on the same files,
# then a Python trainer on the readerd package beside the Rust client
# (bench/python_trainer.py: every array of every batch touched, as the tf.data client
# does), and prints all three. TFPY is the python with tensorflow-cpu (default python3);
# python3 must have the readerd package (pip install ./client/python). Results:
# DATA_DIR/results/ (tf.data), DATA_DIR/readerd-bench.json and DATA_DIR/python-trainer.json.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: bench/compare.sh DATA_DIR [SECONDS]}
seconds=${2:-10}
epochs=${EPOCHS:-40}
harness=../shared/tfdata-bench
tfpy=${TFPY:-python3}

cargo build --release --quiet --bin readerd --bin readerctl
target/release/readerctl gen-demo --out "$data" --specs-only --epochs "$epochs" --quiet

echo "== tf.data service (tfdata_bench.py --modes service, ${seconds} s measured)"
TF_CPP_MIN_LOG_LEVEL=2 "$tfpy" "$harness/tfdata_bench.py" --data "$data" --modes service \
    --compression AUTO,NONE --duration "$seconds" --warmup 2 | tail -n 20

echo "== readerd (readerctl bench, the same files)"
target/release/readerctl bench --data "$data" --consumers 1,4 --quiet
target/release/readerctl bench --data "$data" --consumers 1,4 --quiet --output jsonl > "$data/readerd-bench.json"

echo "== readerd, Python trainer against the Rust client (bench/python_trainer.py, the same specs)"
python3 bench/python_trainer.py "$data" --rounds 2 | tee "$data/python-trainer.out"
tail -n 1 "$data/python-trainer.out" > "$data/python-trainer.json"
