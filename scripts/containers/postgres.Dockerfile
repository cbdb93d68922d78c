# A stand-in for the compose file's postgres image, for scripts/check-containers.sh only: Debian's
# PostgreSQL 15, initialised from POSTGRES_USER, POSTGRES_PASSWORD and POSTGRES_DB on first start
# as the official image is, with password logins over TCP.
# checkov:skip=CKV_DOCKER_2: deploy/compose.yaml gives the postgres service its health check (pg_isready)
# checkov:skip=CKV_DOCKER_3: starts as root, as the official image does, to initialise the cluster and then run the server as the user postgres (postgres-entrypoint.sh)
FROM debian:bookworm
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends postgresql-15 && rm -rf /var/lib/apt/lists/*
COPY postgres-entrypoint.sh /usr/local/bin/
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
