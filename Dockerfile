# Multi-stage build of the herald executable on Debian 12 (bookworm), matching librdkafka-dev.
FROM swift:6.1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends librdkafka-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Resolve dependencies in their own layer so source edits do not refetch them.
COPY Package.swift ./
RUN swift package resolve
COPY Sources ./Sources
COPY Tests ./Tests
RUN swift build -c release --product herald --static-swift-stdlib \
    && cp "$(swift build -c release --show-bin-path)/herald" /herald

FROM debian:bookworm-slim
# Current ca-certificates: APNs chains to the USERTrust RSA root since 2025.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates librdkafka1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home herald
COPY --from=build /herald /usr/local/bin/herald
USER 10001
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/herald"]
CMD ["run"]
