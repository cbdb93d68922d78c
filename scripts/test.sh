#!/usr/bin/env bash
# The whole test suite on real parts: installs what is missing, starts a throw-away PostgreSQL
# and the Tansu broker (scripts/services.sh), builds, runs unit and integration tests, stops
# the services again. Extra arguments go to `swift test` (e.g. --filter WalkingSkeleton).
set -euo pipefail
# shellcheck source=scripts/release-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/release-build.sh"

# The crash tests run the real `herald` executable as a child process.
export HERALD_BIN="$BIN/herald"
# Serially: the integration suites share one broker and two cores; in parallel they starve each other.
swift test -c release -Xswiftc -enable-testing --skip-build --no-parallel "$@"
