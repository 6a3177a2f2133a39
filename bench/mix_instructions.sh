#!/usr/bin/env bash
# Instructions a mixture executes against its components read alone, counted by valgrind
# (cachegrind): exact and repeatable where CPU time on a small shared machine is not.
# The pipeline bench (server/benches/pipeline.rs) reads one workload in process, on one
# thread, without a shuffle buffer, in batches of 256; the count of a run that only writes
# the data is taken off each. Needs valgrind (Debian's package).
#
#   bash bench/mix_instructions.sh [SCALE]     # SCALE 0.5: 100,000 tabular records
#
# READERD_BENCH_EXE=PATH counts a bench executable built elsewhere (another revision's, from
# its `cargo bench -p readerd-server --bench pipeline --no-run`) instead of building this one.
#
# Prints each workload's instructions a record and the two ratios of bench/README.md.
set -euo pipefail
scale=${1:-0.5}
cd "$(dirname "$0")/.."
bench=${READERD_BENCH_EXE:-}
[ -n "$bench" ] || bench=$(cargo bench -q -p readerd-server --bench pipeline --no-run --message-format json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "pipeline" and m.get("executable"):
        print(m["executable"])')
count() {
    READERD_BENCH_SCALE=$scale READERD_BENCH_ONLY=$1 valgrind --tool=cachegrind --cache-sim=no \
        --cachegrind-out-file=/dev/null "$bench" --bench 2>&1 | awk '/I +refs:/ { gsub(",", "", $NF); print $NF }'
}
none=$(count none)
declare -A read
for workload in tabular tabular_csv tabular_mix tabular_halves; do
    read[$workload]=$(( $(count $workload) - none ))
done
records=$(python3 -c "print(int(25000 * $scale) * 8)")
python3 - "$records" "${read[tabular]}" "${read[tabular_csv]}" "${read[tabular_mix]}" "${read[tabular_halves]}" <<'PY'
import sys
records, tab, csv, mix, halves = (int(x) for x in sys.argv[1:])
for name, n, count in [("tabular", tab, records), ("tabular_csv", csv, records),
                       ("tabular_mix", mix, 2 * records), ("tabular_halves", halves, records)]:
    print(f"{name}: {n:,} instructions, {n / count:,.0f} a record")
print(f"tabular_mix ÷ (tabular + tabular_csv): {mix / (tab + csv):.3f}")
print(f"tabular_halves ÷ tabular: {halves / tab:.3f}")
PY
