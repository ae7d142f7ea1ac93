#!/usr/bin/env bash
# Installs what the tests use beyond Rust, under .tools/ (nothing global but Debian packages):
# Node's npm (Debian) for Azurite and playwright-core; Debian's chromium; openssl, unshare and ip;
# a Python virtualenv with the official Azure Event Hubs SDK packages; cargo-zigbuild and Zig for
# `hubhost package`; the Java Event Hubs SDK and Apache Kafka's Java client from Maven Central;
# the Go Event Hubs SDK's modules from the Go module proxy. Each step is skipped when its tool is already there. scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

AZURITE_VERSION=3.35.0   # the last version that runs on Node 20 (3.36+ need Node 21/22)

if ! command -v npm >/dev/null 2>&1; then
  echo "== installing Node.js and npm (Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
PLAYWRIGHT_VERSION=1.65.1  # playwright-core only: it drives Debian's chromium, downloads no browser
# The official JavaScript Event Hubs SDK and its WebSocket constructor, as a peer of the hub.
EVENTHUBS_JS_VERSION=6.0.4
WS_VERSION=8.23.0
if [ ! -x .tools/node_modules/.bin/azurite-blob ] || [ ! -d .tools/node_modules/playwright-core ] \
  || [ ! -d .tools/node_modules/@azure/event-hubs ] || [ ! -d .tools/node_modules/ws ]; then
  echo "== installing azurite@${AZURITE_VERSION}, playwright-core@${PLAYWRIGHT_VERSION}, @azure/event-hubs@${EVENTHUBS_JS_VERSION} and ws@${WS_VERSION} into .tools/"
  mkdir -p .tools
  npm install --prefix .tools --no-audit --no-fund --loglevel=error \
    "azurite@${AZURITE_VERSION}" "playwright-core@${PLAYWRIGHT_VERSION}" \
    "@azure/event-hubs@${EVENTHUBS_JS_VERSION}" "ws@${WS_VERSION}" >/dev/null
fi

# Headless Chromium for the dashboard's browser test (Debian's package).
if ! command -v chromium >/dev/null 2>&1; then
  echo "== installing chromium (Debian package)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# openssl makes the tests' certificates and signing keys; unshare and ip give the IMDS test a
# network namespace of its own (Debian's util-linux and iproute2); jq reads the workspace's test
# targets for scripts/test.sh's lanes.
for tool in openssl:openssl unshare:util-linux ip:iproute2 jq:jq; do
  if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
    echo "== installing ${tool#*:} (Debian package)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${tool#*:}" >/dev/null
  fi
done

# The official Python SDK packages, as independent peers in the interop tests (Event Hubs and
# its blob checkpoint store; Storage blobs, which write what blob inputs read; Storage queues
# and tables, which read what queue and table outputs wrote).
# websocket-client and aiohttp carry the SDK's AMQP over WebSockets (sync and async clients).
# The OpenTelemetry packages: the SDK's tracing as Azure users turn it on, and an OTLP receiver
# built on OpenTelemetry's own protobuf definitions (HTTP and gRPC).
PY_PACKAGES=("azure-eventhub==5.15.1" "azure-eventhub-checkpointstoreblob==1.2.0" "azure-storage-blob==12.26.0" "azure-storage-queue==12.18.1" "azure-data-tables==12.7.0" "websocket-client==1.8.0" "aiohttp==3.11.18" "confluent-kafka==2.16.1" "kafka-python==3.0.12"
  "azure-core-tracing-opentelemetry==1.0.0b13" "opentelemetry-sdk==1.45.2" "opentelemetry-exporter-otlp-proto-http==1.45.2" "opentelemetry-proto==1.45.2" "grpcio==1.85.3")
if [ ! -x .tools/venv/bin/python ] || ! .tools/venv/bin/python -c "import azure.eventhub.extensions.checkpointstoreblob, azure.storage.blob, azure.storage.queue, azure.data.tables, websocket, aiohttp, confluent_kafka, kafka, azure.core.tracing.ext.opentelemetry_span, opentelemetry.sdk, opentelemetry.exporter.otlp.proto.http, opentelemetry.proto, grpc" 2>/dev/null; then
  echo "== installing ${PY_PACKAGES[*]} into .tools/venv"
  if ! command -v python3 >/dev/null 2>&1 || ! python3 -m venv --help >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
  fi
  rm -rf .tools/venv
  python3 -m venv .tools/venv
  .tools/venv/bin/pip install -q --disable-pip-version-check "${PY_PACKAGES[@]}"
fi

# cargo-zigbuild and Zig, for `hubhost package` (the deployable build against glibc 2.28), both
# from PyPI into one virtualenv: cargo-zigbuild's own release binary (its wheel) rather than
# `cargo install`, which would compile it here for minutes on the cores the builds need.
ZIGBUILD_VERSION=0.24.1
ZIG_VERSION=0.15.2
if [ ! -x .tools/zig-venv/bin/cargo-zigbuild ] ||
  ! .tools/zig-venv/bin/cargo-zigbuild --version 2>/dev/null | grep -qF "${ZIGBUILD_VERSION}" ||
  ! .tools/zig-venv/bin/python -m ziglang version >/dev/null 2>&1; then
  echo "== installing cargo-zigbuild ${ZIGBUILD_VERSION} and ziglang ${ZIG_VERSION} into .tools/zig-venv"
  rm -rf .tools/zig-venv
  python3 -m venv .tools/zig-venv
  .tools/zig-venv/bin/pip install -q --disable-pip-version-check \
    "cargo-zigbuild==${ZIGBUILD_VERSION}" "ziglang==${ZIG_VERSION}"
fi

# The official Java Event Hubs SDK with its blob checkpoint store, and Apache Kafka's own Java
# client at each version the tests run (the test kit's KAFKA_JAVA_VERSIONS), as peers of the
# hub: each set of jars copied from Maven Central into .tools/java/NAME, Maven's own downloads
# kept in .tools/java/m2. The tests run their programs (tests/java/*.java) from source with
# these jars; a `.complete` file marks a copy that finished, and a changed pom makes it again.
KAFKA_JAVA_VERSIONS=(3.9.2 4.4.0)
if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then
  echo "== installing a JDK and Maven (Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless maven >/dev/null
fi
java_jars() {
  local name=$1 pom=$2
  shift 2
  local into=.tools/java/$name
  if [ ! -f "$into/.complete" ] || [ "$pom" -nt "$into/.complete" ]; then
    echo "== copying the jars of $pom $* from Maven Central into $into"
    rm -rf "$into"
    mvn -q -B -f "$pom" -Dmaven.repo.local="$PWD/.tools/java/m2" "$@" \
      org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DoutputDirectory="$PWD/$into" >/dev/null
    touch "$into/.complete"
  fi
}
java_jars eventhubs tests/java/eventhubs-pom.xml
for version in "${KAFKA_JAVA_VERSIONS[@]}"; do
  java_jars "kafka-clients-$version" tests/java/kafka-pom.xml "-Dkafka.version=$version"
done

# The official Go Event Hubs SDK (azeventhubs, with azblob for its checkpoint store), as a peer
# of the hub: the modules tests/go/go.sum names, from the Go module proxy into .tools/go, and the
# peer built once there so that the tests' own builds find everything in Go's cache.
if ! command -v go >/dev/null 2>&1; then
  echo "== installing Go (Debian package)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null
fi
if [ ! -f .tools/go/.complete ] || [ tests/go/go.sum -nt .tools/go/.complete ]; then
  echo "== downloading the Go modules of tests/go into .tools/go and building the Go peer"
  mkdir -p .tools/go
  (cd tests/go && GOMODCACHE="$PWD/../../.tools/go/mod" GOCACHE="$PWD/../../.tools/go/cache" \
    GOFLAGS=-mod=readonly go build -o ../../.tools/go/bin/eventhubs-peer .)
  touch .tools/go/.complete
fi
