# readerd: build with the same cargo command CI uses, run from a slim Debian as a non-root user.
# tests/tests/dockerfile.rs checks the binaries, flags, variables and port named here against
# the real binaries, so this file cannot silently fall behind them.
FROM rust:1.95-bookworm AS build
# libjpeg-turbo (TensorFlow's JPEG decoder, for the decodeImage transform) is built from
# source and linked statically: cmake builds it, nasm its SIMD code.
RUN apt-get update && apt-get install -y --no-install-recommends cmake nasm && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The crates and the build directory live in cache mounts (BuildKit, podman): a change to the
# sources rebuilds readerd's own crates, not its 400 dependencies (a first build takes 10+
# minutes, a rebuild after an edit about one). The binaries are copied out of the cache.
RUN --mount=type=cache,target=/usr/local/cargo/registry --mount=type=cache,target=/cache/target \
    CARGO_TARGET_DIR=/cache/target cargo build --release --locked --bin readerd --bin readerctl \
 && mkdir -p target/release && cp /cache/target/release/readerd /cache/target/release/readerctl target/release/

# The Python client's wheel: its native core (client/python/src) builds with the Rust
# toolchain, so trainer images take the wheel from here (docker build --target trainer).
FROM build AS python-wheel
RUN apt-get update && apt-get install -y --no-install-recommends python3-venv \
 && python3 -m venv /venv && /venv/bin/pip install --quiet "maturin>=1.7,<2" \
 && /venv/bin/maturin build --release --locked --manifest-path client/python/Cargo.toml --out /wheels

FROM python:3.11-slim AS trainer
COPY --from=python-wheel /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl
COPY examples /examples

FROM debian:bookworm-slim
# ca-certificates: object stores (s3://, gs://, az:// and https:// roots) are reached over
# TLS verified against the system's roots.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 readerd \
 && useradd --system --uid 10001 --gid 10001 --home-dir /state readerd \
 && mkdir -p /data /state && chown readerd:readerd /state
COPY --from=build /src/target/release/readerd /src/target/release/readerctl /usr/local/bin/
USER readerd
VOLUME ["/data", "/state"]
EXPOSE 50051 9090
ENV READERD_LISTEN=0.0.0.0:50051 READERD_DATA_ROOT=/data READERD_STATE_DIR=/state \
    READERD_METRICS_LISTEN=0.0.0.0:9090
HEALTHCHECK --interval=10s --timeout=6s --retries=3 CMD ["readerctl", "--addr", "http://127.0.0.1:50051", "health"]
ENTRYPOINT ["readerd"]
