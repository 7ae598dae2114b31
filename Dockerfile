# syntax=docker/dockerfile:1
# mcpmon images, one Dockerfile:
#   docker build -t mcpmon .                          production: mcpmon only
#   docker build --target node-python -t mcpmon:node-python .
#                                                     + Node and uv, for npx/uvx stdio servers
#   docker build --target demo -t mcpmon:demo .       + the demo server and fleet (compose stack)
# Base images are pinned to exact versions; bump them deliberately.
# mcpmon reaps orphaned processes itself when it runs as PID 1, so no init
# is needed in front of it (see src/init.rs).

ARG RUST_IMAGE=rust:1.95.0-slim-bookworm
ARG DEBIAN_IMAGE=debian:bookworm-20251117-slim

FROM ${RUST_IMAGE} AS build
WORKDIR /src
# Dependencies first, from the manifests alone, so that a source change
# rebuilds only mcpmon: stub targets stand in for the sources.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src examples \
 && echo 'fn main() {}' > src/main.rs \
 && touch src/lib.rs \
 && echo 'fn main() {}' > examples/demo-server.rs \
 && cargo build --release --locked --bin mcpmon --example demo-server \
 && rm -rf src examples
COPY src src
COPY examples examples
ARG MCPMON_REVISION=unknown
ENV MCPMON_REVISION=${MCPMON_REVISION}
# The stubs' build stamps are older than the sources: touch so cargo rebuilds.
RUN touch src/main.rs src/lib.rs examples/demo-server.rs \
 && cargo build --release --locked --bin mcpmon --example demo-server

FROM ${DEBIAN_IMAGE} AS runtime
ARG MCPMON_REVISION=unknown
ARG MCPMON_VERSION=0.1.0
LABEL org.opencontainers.image.title="mcpmon" \
      org.opencontainers.image.description="Keeps sessions open to a fleet of MCP servers and judges each healthy, degraded or unhealthy" \
      org.opencontainers.image.source="https://github.com/mcpmon/mcpmon" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${MCPMON_VERSION}" \
      org.opencontainers.image.revision="${MCPMON_REVISION}"
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 mcpmon \
 && useradd --system --no-create-home --uid 10001 --gid 10001 mcpmon \
 && mkdir -p /var/lib/mcpmon \
 && chown 10001:10001 /var/lib/mcpmon
COPY --from=build /src/target/release/mcpmon /usr/local/bin/mcpmon
EXPOSE 9850
# The history lives apart from the (read-only) config: mount a volume here
# to keep it across containers.
VOLUME /var/lib/mcpmon
ENTRYPOINT ["/usr/local/bin/mcpmon"]
CMD ["--config.file", "/etc/mcpmon/fleet.yaml", "--web.listen-address", "0.0.0.0:9850", "--storage.path", "/var/lib/mcpmon/history.db"]

# The compose stack: the demo server and a demo fleet inside.
FROM runtime AS demo
COPY --from=build /src/target/release/examples/demo-server /usr/local/bin/demo-server
COPY deploy/mcpmon/fleet.yaml /etc/mcpmon/fleet.yaml
USER 10001:10001

# For stdio servers started with npx (Node) or uvx (uv): the common case.
FROM ghcr.io/astral-sh/uv:0.9.5 AS uv
FROM runtime AS node-python
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm python3 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=uv /uv /uvx /usr/local/bin/
# The root filesystem may be read-only: caches go to /tmp (an emptyDir in the chart).
ENV HOME=/tmp \
    npm_config_cache=/tmp/.npm \
    UV_CACHE_DIR=/tmp/.cache/uv
USER 10001:10001

# The default image: mcpmon only; mount your fleet at /etc/mcpmon/fleet.yaml.
FROM runtime AS production
USER 10001:10001
