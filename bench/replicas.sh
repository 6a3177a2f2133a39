#!/usr/bin/env bash
# Replica scaling on one machine: 1, 2 and 3 readerd replicas sharing the local PostgreSQL,
# each capped at CAP cores, read as one shared reader by CONSUMERS consumers (each reading
# from every replica, as `readerctl read --addr A,B,C` does), the client uncapped. Beside
# them, today's single server (SQLite state store) at the same cap and the same consumers:
# the ledger's cost in the common case.
#
#   [CAP=0.25] [CONSUMERS=4] [EPOCHS=4] [ROUNDS=1] [SPEC_PIPELINE=JSON] [PROFILE=1] \
#       bench/replicas.sh DATA_DIR [WORKLOADS]
#
# DATA_DIR: written here by `readerctl gen-demo` when it has no specs yet (WORKLOADS,
# default "tabular,images"); a workload whose spec is DATA_DIR/WORKLOAD.json brings its own
# files (`bench/jpeg_data.py DATA_DIR` writes the `jpeg` one: decoding and augmenting on
# the server). CPU caps: cgroup v1 `cpu.cfs_quota_us` under
# /sys/fs/cgroup/cpu (root); without it the script stops (taskset cannot give a quarter of
# a core). At the default 0.25 core, 3 replicas use at most 0.75 core of the machine's 2,
# beside the client and PostgreSQL. SPEC_PIPELINE: JSON merged into each spec's
# `pipeline` (say '{"shuffle": {"global": true}}').
# PostgreSQL: a cluster of the script's own (initdb from the installed binaries, port
# 5499, as user postgres), with pg_stat_statements loaded to count the ledger's statements;
# a database per run.
# Prints one row per workload and replica count: records/s, the ratio to one replica and
# to the single server, the cores used, records per server core-second, and PostgreSQL's
# load per 1M records (statements, transactions committed, rows written) with the
# ledger's rows (splits). PROFILE=1: the single server and the first replica of each run
# are sampled with `perf record -e cpu-clock -g` into DATA_DIR/perf-WORKLOAD-single.data
# and DATA_DIR/perf-WORKLOAD-N.data (N replicas); the profiler slows what it samples.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${1:?usage: bench/replicas.sh DATA_DIR [WORKLOADS]}
workloads=${2:-tabular,images}
cap=${CAP:-0.25}
consumers=${CONSUMERS:-4}
epochs=${EPOCHS:-4}
rounds=${ROUNDS:-1}
pg=postgres://postgres@127.0.0.1:5499
cgroups=/sys/fs/cgroup/cpu

[ -w "$cgroups" ] || { echo "no writable $cgroups (cgroup v1 cpu controller, as root): cannot cap CPU" >&2; exit 1; }
cargo build --release --quiet --bin readerd --bin readerctl
ctl=target/release/readerctl
IFS=, read -ra names <<< "$workloads"
for workload in "${names[@]}"; do
    if [ -f "$data/$workload.json" ]; then
        # A workload that brings its own files and spec (bench/jpeg_data.py's jpeg): its
        # spec with EPOCHS epochs, where `readerctl bench` looks for it.
        mkdir -p "$data/specs"
        python3 - "$data/$workload.json" "$data/specs/$workload.json" "$epochs" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec.setdefault("pipeline", {})["numEpochs"] = int(sys.argv[3])
json.dump(spec, open(sys.argv[2], "w"), indent=2)
PY
    else
        # The files once, the specs (with EPOCHS) every time.
        only=""
        [ -d "$data/$workload" ] && only=--specs-only
        $ctl --quiet gen-demo --out "$data" --workloads "$workload" --epochs "$epochs" $only
    fi
    if [ -n "${SPEC_PIPELINE:-}" ]; then
        python3 - "$data/specs/$workload.json" "$SPEC_PIPELINE" <<'PY'
import json, sys
path, extra = sys.argv[1], json.loads(sys.argv[2])
spec = json.load(open(path))
spec.setdefault("pipeline", {}).update(extra)
json.dump(spec, open(path, "w"), indent=2)
PY
    fi
done

# PostgreSQL of the script's own, with pg_stat_statements.
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
pgdir=$(mktemp -d)
chown postgres "$pgdir"
as_postgres() { runuser -u postgres -- "$@"; }
as_postgres "$pgbin/initdb" -D "$pgdir/data" -A trust -U postgres --no-sync -E UTF8 > /dev/null
as_postgres "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w start -o "-p 5499 -c listen_addresses=127.0.0.1 \
    -c unix_socket_directories='' -c shared_preload_libraries=pg_stat_statements -c max_connections=100" > /dev/null
psql "$pg/postgres" -qc "CREATE EXTENSION pg_stat_statements" > /dev/null

quota=$(python3 -c "print(int($cap * 100000))")
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for i in 0 1 2 3; do rmdir "$cgroups/readerd-bench-$i" 2>/dev/null || true; done
    as_postgres "$pgbin/pg_ctl" -D "$pgdir/data" -m fast -w stop > /dev/null 2>&1 || true
    rm -rf "$pgdir"
}
trap cleanup EXIT

# Starts readerd on port 7300+$1 in cgroup readerd-bench-$1, with the rest of the
# arguments; waits until it answers.
start() {
    local i=$1; shift
    local group="$cgroups/readerd-bench-$i"
    mkdir -p "$group"
    echo 100000 > "$group/cpu.cfs_period_us"
    echo "$quota" > "$group/cpu.cfs_quota_us"
    local state; state=$(mktemp -d)
    RUST_LOG=warn target/release/readerd --listen 127.0.0.1:$((7300 + i)) --data-root "$data" \
        --state-dir "$state" --allow-unauthenticated "$@" > /dev/null &
    local pid=$!
    echo "$pid" > "$group/cgroup.procs"
    pids+=("$pid")
    for _ in $(seq 100); do
        $ctl --addr http://127.0.0.1:$((7300 + i)) health > /dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "readerd $i did not start" >&2; exit 1
}

stop_all() {
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
    pids=()
}

# CPU seconds the servers started so far used.
servers_cpu() {
    python3 -c "
import os, sys
tick = os.sysconf('SC_CLK_TCK')
total = 0
for pid in sys.argv[1:]:
    fields = open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()
    total += (int(fields[11]) + int(fields[12])) / tick
print(total)" "${pids[@]}"
}

# One shared reader of workload $1 read from the addresses $2: records/s, records, the
# cores the client used and the cores the servers used (CPU seconds per second).
rate() {
    local before; before=$(servers_cpu)
    local run; run=$($ctl --addr "$2" --quiet bench --use-addr --shared-name "scale-$RANDOM" --data "$data" \
        --workloads "$1" --consumers "$consumers" --output jsonl) || { echo "readerctl bench failed" >&2; kill $$; }
    local after; after=$(servers_cpu)
    python3 -c "
import json, sys
run = json.loads(sys.argv[1])['runs'][0]
print(run['records_per_s'], run['records'], run['client_cores'], ($after - $before) / run['seconds'])" "$run"
}

# Statements run, transactions committed and rows written in database $1 so far.
pg_counters() {
    psql "$pg/postgres" -Atc "SELECT (SELECT coalesce(sum(calls), 0) FROM pg_stat_statements
        WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$1')), xact_commit,
        tup_inserted + tup_updated + tup_deleted FROM pg_stat_database WHERE datname = '$1'"
}

echo "cap ${cap} cores per server, ${consumers} consumers, ${epochs} epochs, best of ${rounds}"
printf "%-8s %-14s %10s %9s %8s %9s %9s %10s %10s %10s %10s %6s\n" workload servers records/s x1-replica x-single \
    "srv cores" "cli cores" "rec/core-s" "PG stmt/1M" "PG xact/1M" "PG rows/1M" splits
for workload in "${names[@]}"; do
    best() { sort -g -r | head -1; }
    # Today's single server, SQLite state store.
    results=$(for _ in $(seq "$rounds"); do
        start 0
        profiler=""
        if [ -n "${PROFILE:-}" ]; then
            perf record -q -e cpu-clock -F 499 -g -p "${pids[0]}" -o "$data/perf-$workload-single.data" > /dev/null 2>&1 &
            profiler=$!
        fi
        rate "$workload" http://127.0.0.1:7300
        if [ -n "$profiler" ]; then kill -INT "$profiler"; wait "$profiler" || true; fi
        stop_all
    done | best)
    read -r single _ client_cores server_cores <<< "$results"
    printf "%-8s %-14s %10.0f %9s %8.2f %9.2f %9.2f %10.0f %10s %10s %10s %6s\n" "$workload" "single server" \
        "$single" - 1.00 "$server_cores" "$client_cores" "$(python3 -c "print($single / $server_cores)")" - - - -
    one=""
    for n in 1 2 3; do
        results=$(for _ in $(seq "$rounds"); do
            db="readerd_scale_$$_$n"
            psql "$pg/postgres" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" > /dev/null
            addrs=""
            for i in $(seq "$n"); do
                start "$i" --state-url "$pg/$db"
                addrs="$addrs${addrs:+,}http://127.0.0.1:$((7300 + i))"
            done
            read -r stmt0 xact0 rows0 < <(pg_counters "$db" | tr '|' ' ')
            profiler=""
            if [ -n "${PROFILE:-}" ]; then
                perf record -q -e cpu-clock -F 499 -g -p "${pids[0]}" -o "$data/perf-$workload-$n.data" \
                    > /dev/null 2>&1 &
                profiler=$!
            fi
            read -r per_s records client_cores server_cores < <(rate "$workload" "$addrs")
            if [ -n "$profiler" ]; then kill -INT "$profiler"; wait "$profiler" || true; fi
            sleep 1 # pg_stat_database is updated at most every 500 ms
            read -r stmt1 xact1 rows1 < <(pg_counters "$db" | tr '|' ' ')
            splits=$(psql "$pg/$db" -Atc "SELECT count(*) FROM readerd_splits")
            stop_all
            psql "$pg/postgres" -qc "DROP DATABASE $db WITH (FORCE)" > /dev/null
            python3 -c "print($per_s, $server_cores, $client_cores, ($stmt1 - $stmt0) * 1e6 / $records,
                ($xact1 - $xact0) * 1e6 / $records, ($rows1 - $rows0) * 1e6 / $records, $splits)"
        done | sort -g -r | head -1)
        read -r per_s server_cores client_cores stmt xact rows splits <<< "$results"
        one=${one:-$per_s}
        printf "%-8s %-14s %10.0f %9.2f %8.2f %9.2f %9.2f %10.0f %10.0f %10.0f %10.0f %6s\n" "$workload" \
            "$n replica(s)" "$per_s" "$(python3 -c "print($per_s / $one)")" "$(python3 -c "print($per_s / $single)")" \
            "$server_cores" "$client_cores" "$(python3 -c "print($per_s / $server_cores)")" "$stmt" "$xact" "$rows" \
            "$splits"
    done
done
