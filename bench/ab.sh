#!/usr/bin/env bash
# The server's own CPU time and page faults while one consumer (or CONSUMERS private
# streams at once) reads a workload: the A/B measure of bench/README.md, steadier than
# records/s on a small shared machine.
#
#   [CONSUMERS=4] bash bench/ab.sh READERD_BINARY DATA_DIR WORKLOAD [PORT]
#
# DATA_DIR is written by `readerctl gen-demo` (or gen_data.py + `gen-demo --specs-only`).
# Alternate two binaries for several rounds and compare the `cpu` and `faults` columns.
set -euo pipefail
binary=${1:?usage: bench/ab.sh READERD_BINARY DATA_DIR WORKLOAD [PORT]}
data=${2:?data directory}
workload=${3:?workload}
port=${4:-50071}
consumers=${CONSUMERS:-1}
readerctl="$(dirname "$0")/../target/release/readerctl"
state=$(mktemp -d)
stat=$(mktemp)
trap 'rm -rf "$state" "$stat"' EXIT

"$binary" --listen "127.0.0.1:$port" --allow-unauthenticated --data-root "$data" --state-dir "$state" \
    > /dev/null 2>&1 &
server=$!
sleep 0.5
perf stat -e task-clock,page-faults -p "$server" -o "$stat" &
perf=$!
sleep 0.2
"$readerctl" bench --data "$data" --use-addr --addr "http://127.0.0.1:$port" --consumers "$consumers" \
    --workloads "$workload" --quiet | awk -v w="$workload" '$1 == w { printf "%s records/s  %s MB/s  ", $3, $4 }'
kill -INT "$perf"; wait "$perf" 2>/dev/null || true
kill "$server"; wait "$server" 2>/dev/null || true
awk '/task-clock/ { printf "cpu %s ms  ", $1 } /page-faults/ { printf "faults %s", $1 }' "$stat"
echo
