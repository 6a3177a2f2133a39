#!/usr/bin/env bash
# The decoders' fuzz smoke run, for CI: fuzzing::decode_with_spec (the spec_and_records
# target's entry point: a spec and its records made together) over 20,000 generated
# inputs, and the other entry points over mutated golden vectors and hostile specs, as a
# plain test that needs neither cargo-fuzz nor nightly (READERD_FUZZ_ROUNDS sets the
# count of generated inputs).
#
#   fuzz/smoke.sh                  the test alone
#   fuzz/smoke.sh --libfuzzer 30   then the spec_and_records target under libFuzzer for
#                                  30 s: coverage-guided with cargo-fuzz installed
#                                  (`cargo install cargo-fuzz`), otherwise the target built
#                                  plainly and run on libFuzzer's random inputs
set -euo pipefail
cd "$(dirname "$0")/.."

cargo test --locked -p readerd-server --test fuzz_smoke

if [[ "${1:-}" == "--libfuzzer" ]]; then
    seconds="${2:-30}"
    cd fuzz
    if cargo fuzz --version >/dev/null 2>&1; then
        # cargo fuzz passes nightly flags; RUSTC_BOOTSTRAP lets the stable toolchain take them.
        RUSTC_BOOTSTRAP=1 cargo fuzz run spec_and_records -- -max_total_time="$seconds"
    else
        # The fuzz crate is outside the workspace: its lock starts from the workspace's.
        [[ -f Cargo.lock ]] || cp ../Cargo.lock Cargo.lock
        cargo build --bin spec_and_records
        target="${CARGO_TARGET_DIR:-target}"
        "$target/debug/spec_and_records" -max_total_time="$seconds"
    fi
fi
