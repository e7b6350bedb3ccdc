# syntax=docker/dockerfile:1
# The agentmbx relay: a static binary (CGO_ENABLED=0; the SQLite driver is pure Go) on a
# distroless base, run as a non-root user, with its store on the /data volume.
#
#   docker build -t agentmbx-relay --build-arg VERSION=$(git describe --tags --always) .
#   agentmbx relay keygen > relay-key          # once; keep it secret (or let the relay make /data/relay.key)
#   docker run -d --name relay -p 7374:7374 -v relay-data:/data \
#     --mount type=bind,src=$PWD/relay-key,dst=/run/secrets/mbx_relay_key,readonly \
#     -e MBX_RELAY_KEY_FILE=/run/secrets/mbx_relay_key agentmbx-relay
# With Compose or Swarm, declare a secret mbx_relay_key: it is mounted at the same path.
# Health: the HEALTHCHECK runs 'agentmbx relay healthcheck' (GET /healthz); /readyz says whether
# the store takes writes. Metrics: add --metrics-listen :9374 (and keep that port private).
# docker stop sends SIGTERM: the relay drains (parked pulls answer, requests in flight finish
# within 10 s, the store closes); the default 10 s stop timeout fits, --stop-timeout 30 is safer.

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/agentmbx/agentmbx/internal/version.stamped=${VERSION}" -o /out/agentmbx ./cmd/agentmbx
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/agentmbx /usr/local/bin/agentmbx
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV MBX_RELAY_DIR=/data
VOLUME /data
EXPOSE 7374
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["/usr/local/bin/agentmbx", "relay", "healthcheck", "--url", "http://127.0.0.1:7374/healthz"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/agentmbx", "relay", "serve"]
CMD ["--listen", ":7374", "--log-format", "json"]
