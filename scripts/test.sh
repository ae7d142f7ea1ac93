#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need (Node's npm for
# Azurite; Azurite itself into .tools/), then runs every test. The tests start their own
# services (Azurite, hubhost processes) on free loopback ports and stop them.
set -euo pipefail
cd "$(dirname "$0")/.."

AZURITE_VERSION=3.35.0   # the last version that runs on Node 20 (3.36+ need Node 21/22)

if ! command -v npm >/dev/null 2>&1; then
  echo "== installing Node.js and npm (Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
if [ ! -x .tools/node_modules/.bin/azurite-blob ]; then
  echo "== installing azurite@${AZURITE_VERSION} into .tools/"
  mkdir -p .tools
  npm install --prefix .tools --no-audit --no-fund --loglevel=error "azurite@${AZURITE_VERSION}" >/dev/null
fi

echo "== cargo test"
cargo test --all-targets "$@"
