# Herald's image: built on the toolchain the project is developed with (Swift 6.3, Debian 12,
# whose librdkafka-dev matches the runtime's librdkafka1), run as a non-root user on a slim
# Debian with current CA roots. Checked by parsing only (no Docker engine where it was written).
FROM swift:6.3-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends librdkafka-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Resolve dependencies in their own layer so source edits do not refetch them.
COPY Package.swift ./
RUN swift package resolve
COPY Sources ./Sources
COPY Tests ./Tests
RUN swift build -c release --product herald --static-swift-stdlib \
    && swift build -c release --product mock-apns --static-swift-stdlib \
    && cp "$(swift build -c release --show-bin-path)/herald" "$(swift build -c release --show-bin-path)/mock-apns" /usr/local/bin/

FROM debian:bookworm-slim
# Current ca-certificates: APNs chains to the USERTrust RSA root since 2025.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates librdkafka1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home herald
COPY --from=build /usr/local/bin/herald /usr/local/bin/herald
# The mock APNs, for the compose file's laptop setup; never point production at it.
COPY --from=build /usr/local/bin/mock-apns /usr/local/bin/mock-apns
USER 10001
EXPOSE 8080
# Liveness over bash's /dev/tcp: the slim image has no HTTP client.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${HERALD_HTTP_PORT:-8080} && printf 'GET /health/live HTTP/1.0\\r\\n\\r\\n' >&3 && grep -q ' 200 ' <&3"]
ENTRYPOINT ["/usr/local/bin/herald"]
CMD ["run"]
