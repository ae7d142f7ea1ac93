#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need
# (scripts/install-test-tools.sh), then runs every test of the workspace with
# HUBHOST_REQUIRE_TOOLS=1, so a test whose tool is missing fails instead of being skipped. The
# tests start their own services (Azurite, hubhost processes) on free loopback ports and stop them.
# Arguments go to `cargo test` (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-tools.sh
export HUBHOST_REQUIRE_TOOLS=1

echo "== cargo test"
cargo test --workspace --all-targets "$@"
# --all-targets leaves out the examples in the documentation; they run here.
echo "== cargo test --doc"
cargo test --workspace --doc
