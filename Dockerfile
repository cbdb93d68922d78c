# Herald's image (the default target, `docker build .`) and the mock APNs' (`--target
# mock-apns`), so the production image does not ship the mock: built on the toolchain the
# project is developed with (Swift 6.3, Debian 12, whose librdkafka-dev matches the runtime's
# librdkafka1), run as a non-root user (uid 10001) on a slim Debian with current CA roots.
# scripts/check-deploy.sh lints it with hadolint and scans it with checkov.
#
# checkov:skip=CKV_DOCKER_2: no HEALTHCHECK in either image; the image also runs `herald migrate` (which exits) and `herald send`, so compose probes each long-running service itself and Kubernetes uses the Deployment's probes
#
# Debian packages are not pinned to versions (hadolint DL3008, ignored below on purpose): a
# bookworm mirror keeps only the newest build of each package, so a pinned version stops
# installing as soon as a security update replaces it, and the newest ca-certificates and
# librdkafka1 are what this image should carry. Pin the base images by digest
# (swift:6.3-bookworm@sha256:..., debian:bookworm-slim@sha256:...) for a build that does not move.
FROM swift:6.3-bookworm AS build
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends librdkafka-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies in their own layer, so source edits do not fetch them again. A Package.resolved
# in the build context pins them (docs/operations.md, "Reproducible images"): resolving then fails instead of
# moving to other versions when it no longer matches Package.swift. .dockerignore leaves it out
# until an operator commits one resolved against the dependencies' public repositories.
COPY Package.swift Package.resolved* ./
RUN if [ -f Package.resolved ]; then swift package resolve --force-resolved-versions; else swift package resolve; fi
COPY Sources ./Sources
COPY Tests ./Tests
RUN swift build -c release --product herald --static-swift-stdlib \
    && swift build -c release --product mock-apns --static-swift-stdlib \
    && cp "$(swift build -c release --show-bin-path)/herald" "$(swift build -c release --show-bin-path)/mock-apns" /usr/local/bin/

# What both images run on: a slim Debian with librdkafka and current CA roots (APNs chains to the
# USERTrust RSA root since 2025), and the user uid 10001.
FROM debian:bookworm-slim AS runtime
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates librdkafka1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home herald

# The mock APNs, for the compose file's laptop setup and tests only, in an image of its own:
# `docker build --target mock-apns`. Never point production at it.
FROM runtime AS mock-apns
COPY --from=build /usr/local/bin/mock-apns /usr/local/bin/mock-apns
USER 10001
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/mock-apns"]

# Herald's image, the default target (the last stage): herald alone, without the mock.
FROM runtime AS herald
# Which commit the image was built from (`docker build --build-arg REVISION=$(git rev-parse HEAD)`),
# so a running member's image names its source (docker inspect, a registry's UI).
ARG REVISION=unknown
LABEL org.opencontainers.image.title="herald" \
      org.opencontainers.image.source="https://github.com/herald-push/herald" \
      org.opencontainers.image.revision="${REVISION}"
# And Herald exports it as herald_build_info{revision}.
ENV HERALD_BUILD_REVISION="${REVISION}"
COPY --from=build /usr/local/bin/herald /usr/local/bin/herald
USER 10001
EXPOSE 8080
# No HEALTHCHECK here: the image runs `herald run`, `herald migrate` (which exits) and `herald
# send`, so the probe belongs where the command is known: deploy/compose.yaml gives each
# long-running service its own, Kubernetes uses the Deployment's probes (it ignores HEALTHCHECK).
ENTRYPOINT ["/usr/local/bin/herald"]
CMD ["run"]
