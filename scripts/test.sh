#!/usr/bin/env bash
# The whole test suite on real parts: installs what is missing, starts a throw-away PostgreSQL
# and the Tansu broker (scripts/services.sh), builds, runs unit and integration tests, stops
# the services again. Extra arguments go to `swift test` (e.g. --filter WalkingSkeleton).
set -euo pipefail

# Formatting first (seconds): the toolchain's swift-format with the repository's .swift-format.
(cd "$(dirname "${BASH_SOURCE[0]}")/.." && PATH="/opt/swift/usr/bin:$PATH" swift-format lint --strict --recursive \
    Sources Tests Examples/Embedding/Sources Package.swift Examples/Embedding/Package.swift)

# The embedded migrations match schemas/migrations/ as the generator writes them (instant).
"$(dirname "${BASH_SOURCE[0]}")/generate-migrations.sh" --check

# The deploy files under the tools that read them (seconds; installs its tools on first use).
"$(dirname "${BASH_SOURCE[0]}")/check-deploy.sh"

# shellcheck source=scripts/release-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/release-build.sh"

# The connection handler's fuzz target, built apart (.build-fuzz): every module is instrumented
# for libFuzzer, and the target depends on APNSWire and HTTP2Transport alone, without swift-crypto or swift-nio-ssl
# (77 s from nothing; 197 to 208 s with them). It builds after the release build, not beside it:
# beside it at the lowest priority it saved nothing (a fresh clone's release build took 833 s
# instead of 589 s), and while the tests run, even at the idle scheduling class, a busy neighbour
# made timing-bound tests fail.
swift build --product FuzzConnectionHandler --scratch-path .build-fuzz \
    -Xswiftc -sanitize=fuzzer -Xswiftc -DFUZZING -Xswiftc -enable-testing

# Herald's library products as another package uses them (Examples/Embedding, its own manifest
# and resolution): the APNs client sends to the mock, the pipeline runs with in-memory parts, and
# the pipeline-only executable links neither librdkafka nor postgres-nio. It builds into the
# release build's folder with the same flags, so only the examples' own targets compile (seconds,
# where a build apart compiled every dependency again: 220 s from a fresh clone).
# SwiftPM reuses the build folder's plan (.build/release.yaml) when it finds it current, and after
# Herald's own release build it found Herald's plan current for the examples too: "Build
# complete!" and no APNSClientExample (seen in warm folders, twice on 2026-11-29, even with the
# examples' manifest touched). The plan is removed, so the examples' build plans its own graph
# (seconds: Herald's modules are the release build's), and the examples are removed first, so a
# build that did not link them fails below.
EXAMPLES_BUILD=(--package-path Examples/Embedding --scratch-path "$ROOT/.build" -c release -Xswiftc -enable-testing)
EXAMPLES="$(swift build "${EXAMPLES_BUILD[@]}" --show-bin-path)"
rm -f "$EXAMPLES/APNSClientExample" "$EXAMPLES/PipelineExample" "$ROOT/.build/release.yaml"
swift build "${EXAMPLES_BUILD[@]}"

# Every build is done: only now the services start and their variables are exported.
start_services

# The crash tests run the real `herald` executable as a child process.
export HERALD_BIN="$BIN/herald"
# Dictionaries ordered alike in every process: a simulation seed that fails here replays exactly
# (ShippedPipelineSimulationTests; docs/testing.md).
export SWIFT_DETERMINISTIC_HASHING=1
# The tests' files (keys, certificates, each Herald's log) go to .local/test-tmp, kept for a look
# after a failure and removed when the next run starts.
rm -rf .local/test-tmp && mkdir -p .local/test-tmp
if (($#)); then
    TMPDIR="$ROOT/.local/test-tmp" swift test -c release -Xswiftc -enable-testing --skip-build --no-parallel "$@"
else
    # Two shards at once, each serial on its own broker and PostgreSQL: the integration suites
    # mostly wait (for a rebalance, an outage's end, a crash's restart), and one after the other
    # they used about a third of the two cores. SHARD_2 holds about half of their time (suites'
    # times in docs/testing.md). The shards run the test bundle itself: two `swift test` at once
    # take turns on the build folder's lock.
    SHARD_2='^IntegrationTests\.(ChaosTests|FCMQuotaDrillTests|CampaignRolloutTests|RolloutDrillTests|BulkLaneTests|ReadinessTests|AndroidDeliveryIntegrationTests|ContractDetailsTests|CredentialsReloadTests|KafkaOverTLSTests|TracingTests)/'
    TESTS=(env NO_COLOR=1 TMPDIR="$ROOT/.local/test-tmp" "$BIN/heraldPackageTests.xctest" --testing-library swift-testing --no-parallel)
    start_second_services
    (
        # shellcheck disable=SC1091
        source .local/run-2/services.env
        export HERALD_SERVICES_RUN="$ROOT/.local/run-2"
        exec "${TESTS[@]}" --filter "$SHARD_2"
    ) >.local/test-tmp/shard-2.log 2>&1 &
    SECOND_SHARD=$!
    FIRST_STATUS=0
    "${TESTS[@]}" --skip "$SHARD_2" || FIRST_STATUS=$?
    SECOND_STATUS=0
    wait "$SECOND_SHARD" || SECOND_STATUS=$?
    echo "--- the second shard (.local/test-tmp/shard-2.log) ---"
    cat .local/test-tmp/shard-2.log
    if ((FIRST_STATUS || SECOND_STATUS)); then
        echo "tests failed: first shard exit $FIRST_STATUS, second shard exit $SECOND_STATUS" >&2
        exit 1
    fi
fi

# The connection handler under libFuzzer for a bounded time, from the corpus in the repository
# (new inputs go to a scratch directory; a crash leaves its input in .local/fuzz and fails here).
# The fuzzer runs on both cores (-fork=2) in the background while the examples run: 30 s that
# way ran 24,608 to 49,695 inputs in seven runs, as many as 60 s on one core (39,565 to 46,750).
mkdir -p .local/fuzz/new-inputs
(cd .local/fuzz && exec "$ROOT/.build-fuzz/debug/FuzzConnectionHandler" -fork=2 -max_total_time="${FUZZ_SECONDS:-30}" -timeout=10 \
    new-inputs "$ROOT/Fuzz/corpus/connection-handler") >.local/fuzz/fuzz.log 2>&1 &
FUZZER=$!

"$EXAMPLES/APNSClientExample"
"$EXAMPLES/PipelineExample"
# grep reads all its input (no -q), so pipefail never sees nm or ldd cut off.
if ldd "$EXAMPLES/PipelineExample" | grep rdkafka >/dev/null || nm "$EXAMPLES/PipelineExample" | grep PostgresNIO >/dev/null; then
    echo "PipelineExample links librdkafka or postgres-nio" >&2
    exit 1
fi
echo "embedding examples: passed"

wait "$FUZZER" || {
    tail -n 40 .local/fuzz/fuzz.log >&2
    echo "fuzzing: the connection handler crashed; the input is in .local/fuzz (log: .local/fuzz/fuzz.log)" >&2
    exit 1
}
echo "fuzzing: no crash in ${FUZZ_SECONDS:-30} s on two cores ($(grep -o '^#[0-9]*' .local/fuzz/fuzz.log | tail -n 1 | tr -d '#') inputs)"
