#!/usr/bin/env bash
# The checkpoint store benchmark on a local directory and on Azurite (started here, stopped at
# the end), in one run so that the figures compare. Installs Azurite like scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .tools/node_modules/.bin/azurite-blob ]; then
  mkdir -p .tools
  npm install --prefix .tools --no-audit --no-fund --loglevel=error "azurite@3.35.0" >/dev/null
fi
cargo build --release -q -p hubhost -p hubhost-bench
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
.tools/node_modules/.bin/azurite-blob --blobHost 127.0.0.1 --blobPort "$port" --location "$work/azurite" \
  --silent --disableTelemetry --skipApiVersionCheck --loose &
azurite=$!
# Azurite writes its database as it closes: wait for it before its folder goes.
trap 'kill $azurite 2>/dev/null; wait $azurite 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
key="Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
./target/release/hubhost bench checkpoints "$@" \
  --storage "$work/dir" \
  --storage "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=$key;BlobEndpoint=http://127.0.0.1:$port/devstoreaccount1;"
