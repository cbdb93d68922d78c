#!/usr/bin/env bash
# The Kafka stand-in's process (kafka.Dockerfile): Tansu on 127.0.0.1:9094, advertised as
# kafka:19092 where the ApiVersions proxy listens for the other containers.
set -euo pipefail
tansu broker --listener-url tcp://127.0.0.1:9094 --advertised-listener-url tcp://kafka:19092 \
  --storage-engine memory://tansu/ &
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/9094) 2>/dev/null && break
  sleep 0.1
done
exec python3 /usr/local/bin/kafka-apiversions-proxy.py --listen 0.0.0.0:19092 --upstream 127.0.0.1:9094
