# readerd: build with the same cargo command CI uses, run from a slim Debian as a non-root user.
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
EXPOSE 50051
ENV READERD_LISTEN=0.0.0.0:50051 READERD_DATA_ROOT=/data READERD_STATE_DIR=/state
ENTRYPOINT ["readerd"]
