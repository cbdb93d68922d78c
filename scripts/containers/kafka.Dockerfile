# A stand-in for the compose file's apache/kafka image, for scripts/check-containers.sh only: no
# registry is reachable where the check runs. Tansu (the broker the test suites use) behind the
# test-only ApiVersions proxy (scripts/kafka-apiversions-proxy.py), answering other containers on
# kafka:19092 as the real image's INTERNAL listener does. Never a production broker.
# checkov:skip=CKV_DOCKER_2: scripts/containers/compose.check.yaml gives the stand-in its health check (its proxy accepts connections)
# checkov:skip=CKV_DOCKER_3: a throw-away stand-in that scripts/check-containers.sh builds, runs on its own network and deletes; never deployed
FROM debian:bookworm
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*
COPY tansu kafka-apiversions-proxy.py kafka-entrypoint.sh /usr/local/bin/
EXPOSE 19092
ENTRYPOINT ["/usr/local/bin/kafka-entrypoint.sh"]
