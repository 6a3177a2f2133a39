# readerd: build with the same cargo command CI uses, run from a slim Debian as a non-root user.
# tests/tests/dockerfile.rs checks the binaries, flags, variables and port named here against
# the real binaries, so this file cannot silently fall behind them.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin readerd --bin readerctl

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /state readerd \
 && mkdir -p /data /state && chown readerd /state
COPY --from=build /src/target/release/readerd /src/target/release/readerctl /usr/local/bin/
USER readerd
VOLUME ["/data", "/state"]
EXPOSE 50051 9090
ENV READERD_LISTEN=0.0.0.0:50051 READERD_DATA_ROOT=/data READERD_STATE_DIR=/state \
    READERD_METRICS_LISTEN=0.0.0.0:9090
HEALTHCHECK --interval=10s --timeout=6s --retries=3 CMD ["readerctl", "--addr", "http://127.0.0.1:50051", "health"]
ENTRYPOINT ["readerd"]
