# mcpmon with the demo server, for the compose stack and for production use
# (mount your own fleet file over /etc/mcpmon/fleet.yaml).
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
COPY examples examples
RUN cargo build --release --locked --bin mcpmon --example demo-server

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --no-create-home --uid 10001 mcpmon
COPY --from=build /src/target/release/mcpmon /usr/local/bin/mcpmon
COPY --from=build /src/target/release/examples/demo-server /usr/local/bin/demo-server
COPY deploy/mcpmon/fleet.yaml /etc/mcpmon/fleet.yaml
USER mcpmon
EXPOSE 9850
ENTRYPOINT ["/usr/local/bin/mcpmon"]
CMD ["--config.file", "/etc/mcpmon/fleet.yaml", "--web.listen-address", "0.0.0.0:9850"]
