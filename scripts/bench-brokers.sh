#!/usr/bin/env bash
# The hub side by side with the servers users would run instead, on this machine, in one run,
# each started fresh on a data folder of its own, in turns, REPS times:
# - its Kafka endpoint against Apache Kafka's own broker (KRaft, one node, Kafka's default 1 GB
#   heap), with one kafka-clients 4.4.0 load (tests/java/KafkaLoad.java: an idempotent producer
#   at full speed, 2,000 records paced for the latencies, a consumer group reading them back);
# - its AMQP against ActiveMQ Artemis (its default profile; durable messages journalled without
#   a sync, as the hub and Kafka write without one), with one AMQP load on Proton-J
#   (tests/java/AmqpLoad.java: the same three parts).
# Both servers come from Maven Central, into .tools/java. Prints each run, then per pair the
# median and range of each figure and the hub's ratio: the rates, the paced sends' p50 and p99,
# the server's peak resident memory and its CPU time per record.
#
#   scripts/bench-brokers.sh                      # REPS=3 RECORDS=50000 SIZE=512
#   REPS=1 RECORDS=5000 scripts/bench-brokers.sh  # a short form
# HUBHOST_EXE names the hubhost executable to measure instead of building the release one (the
# suite's short form, tests/clients/side_by_side.rs, gives it the test build).
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
RECORDS=${RECORDS:-50000}
SIZE=${SIZE:-512}
KAFKA_VERSION=4.4.0
ARTEMIS_VERSION=2.40.0

scripts/install-test-tools.sh > /dev/null
maven() { mvn -q -B -Dmaven.repo.local="$PWD/.tools/java/m2" "$@" > /dev/null; }
# The jars of a pom in tests/java, copied into .tools/java/NAME once (again when the pom changes).
jars() {
  local name=$1 pom=$2
  if [ ! -f ".tools/java/$name/.complete" ] || [ "$pom" -nt ".tools/java/$name/.complete" ]; then
    echo "== copying the jars of $pom from Maven Central into .tools/java/$name"
    rm -rf ".tools/java/$name"
    maven -f "$pom" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
      -DoutputDirectory="$PWD/.tools/java/$name"
    touch ".tools/java/$name/.complete"
  fi
}
broker_jars=.tools/java/kafka-broker-$KAFKA_VERSION
jars "kafka-broker-$KAFKA_VERSION" tests/java/broker-pom.xml
amqp_jars=.tools/java/amqp-load
jars amqp-load tests/java/amqp-pom.xml
artemis_home=.tools/java/apache-artemis-$ARTEMIS_VERSION
if [ ! -x "$artemis_home/bin/artemis" ]; then
  echo "== unpacking ActiveMQ Artemis $ARTEMIS_VERSION from Maven Central into .tools/java"
  # (Outside a project the goal leaves its marker files under the working folder: a scratch one.)
  scratch=$(mktemp -d)
  repository=$PWD
  (cd "$scratch" && mvn -q -B -Dmaven.repo.local="$repository/.tools/java/m2" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:unpack \
    -Dartifact="org.apache.activemq:apache-artemis:$ARTEMIS_VERSION:tar.gz:bin" \
    -DoutputDirectory="$repository/.tools/java" > /dev/null)
  rm -rf "$scratch"
fi
if [ -z "${HUBHOST_EXE:-}" ]; then
  cargo build --release -q -p hubhost
  HUBHOST_EXE=./target/release/hubhost
fi

work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill -9 "$server" 2>/dev/null; rm -rf "$work"' EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return; sleep 0.1; done
  echo "port $1 never opened" >&2
  exit 1
}
# utime + stime of a process, in seconds; its peak resident memory, in KiB.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
peak_kib() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status"; }
kafka_load() { java -cp ".tools/java/kafka-clients-$KAFKA_VERSION/*" tests/java/KafkaLoad.java "$@" 2>> "$work/load.log"; }
amqp_load() { java -cp "$amqp_jars/*" tests/java/AmqpLoad.java "$@" 2>> "$work/load.log"; }

# Apache Kafka's broker: KRaft, one node, on `$2`, its log in `$1`.
start_kafka() {
  local data=$1 port=$2 controller id
  controller=$(free_port)
  cat > "$data/server.properties" << EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$data/log
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
EOF
  id=$(java -cp "$broker_jars/*" kafka.tools.StorageTool random-uuid 2> /dev/null)
  java -cp "$broker_jars/*" kafka.tools.StorageTool format -t "$id" -c "$data/server.properties" > /dev/null 2>&1
  java -Xms1g -Xmx1g -cp "$broker_jars/*" kafka.Kafka "$data/server.properties" > "$data/server.log" 2>&1 &
  server=$!
}

# ActiveMQ Artemis: an instance in `$1`, AMQP on `$2` only; durable messages journalled without a
# sync; an address made on first use is a queue (anycast), as an event hub is.
start_artemis() {
  local data=$1 port=$2
  "$artemis_home/bin/artemis" create "$data/instance" --user load --password load --allow-anonymous \
    --silent --no-web --no-autotune > /dev/null
  python3 - "$data/instance/etc/broker.xml" "$port" << 'EOF'
import re, sys
path, port = sys.argv[1], sys.argv[2]
xml = open(path).read()
xml = re.sub(r"<acceptors>.*?</acceptors>",
             f'<acceptors><acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP;useEpoll=true;'
             'amqpCredits=1000;amqpLowCredits=300</acceptor></acceptors>', xml, flags=re.S)
xml = xml.replace("</journal-type>",
                  "</journal-type>\n      <journal-sync-non-transactional>false</journal-sync-non-transactional>", 1)
xml = xml.replace('<address-setting match="#">',
                  '<address-setting match="#">\n'
                  '            <default-address-routing-type>ANYCAST</default-address-routing-type>\n'
                  '            <default-queue-routing-type>ANYCAST</default-queue-routing-type>', 1)
open(path, "w").write(xml)
EOF
  # (`bin/artemis run` execs the JVM: $! is the server.)
  "$data/instance/bin/artemis" run > "$data/server.log" 2>&1 &
  server=$!
}

# One measurement of `$1` (hub-kafka, kafka, hub-amqp or artemis) in run `$2`: starts it on a
# data folder of its own, runs the load, prints one JSON line, kills it.
measure() {
  local kind=$1 run=$2 data="$work/$1-$2" topic="load$2" port amqp figures before after
  mkdir -p "$data"
  port=$(free_port)
  amqp=$(free_port)
  case $kind in
    hub-*)
      "$HUBHOST_EXE" hub --port "$amqp" --kafka-port "$port" --data-dir "$data" \
        --hub "$topic:4" > "$data/server.log" 2>&1 &
      server=$!
      wait_port "$amqp"
      ;;
    kafka) start_kafka "$data" "$port" ;;
    artemis) start_artemis "$data" "$port" ;;
  esac
  wait_port "$port"
  if [ "$kind" = kafka ]; then kafka_load create-topic "127.0.0.1:$port" "$topic" 4 > /dev/null; fi
  before=$(cpu_of "$server")
  case $kind in
    hub-kafka)
      figures=$(kafka_load "127.0.0.1:$port" \
        "Endpoint=sb://localhost:$amqp;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;" \
        "$topic" "$RECORDS" "$SIZE")
      ;;
    kafka) figures=$(kafka_load "127.0.0.1:$port" - "$topic" "$RECORDS" "$SIZE") ;;
    hub-amqp)
      figures=$(amqp_load hub localhost "$amqp" RootManageSharedAccessKey SAS_KEY_VALUE "$topic" 4 "$RECORDS" "$SIZE")
      ;;
    artemis) figures=$(amqp_load broker 127.0.0.1 "$port" "$topic" "$RECORDS" "$SIZE") ;;
  esac
  after=$(cpu_of "$server")
  echo "$figures" | python3 -c "
import json, sys
f = json.load(sys.stdin)
done = f.get('fetched') or f.get('received')
f.update(server='$kind', run=$run, peak_rss_mib=round($(peak_kib "$server") / 1024, 1),
         cpu_us_per_record=round(($after - $before) * 1e6 / done, 1))
print(json.dumps(f))"
  kill -9 "$server"
  wait "$server" 2> /dev/null || true
  server=
}

echo "== $REPS runs of $RECORDS records of $SIZE bytes (and 2,000 paced) per server, in turns"
for run in $(seq "$REPS"); do
  # Alternate who goes first, so that neither always meets a warmer machine.
  if [ $((run % 2)) = 1 ]; then
    order="hub-kafka kafka hub-amqp artemis"
  else
    order="kafka hub-kafka artemis hub-amqp"
  fi
  for kind in $order; do measure "$kind" "$run" | tee -a "$work/runs.jsonl"; done
done
python3 - "$work/runs.jsonl" << 'EOF'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
pairs = [
    ("hub-kafka", "kafka", ["produce_per_s", "fetch_per_s", "produce_p50_ms", "produce_p99_ms"]),
    ("hub-amqp", "artemis", ["send_per_s", "receive_per_s", "send_p50_ms", "send_p99_ms"]),
]
def summary(kind, key):
    values = [r[key] for r in runs if r["server"] == kind]
    return statistics.median(values), min(values), max(values)
fmt = lambda s: f"{s[0]:,.1f} ({s[1]:,.1f}–{s[2]:,.1f})"
for hub, other, keys in pairs:
    print(f"\n{'figure':<20} {hub + ' median (range)':>34} {other + ' median (range)':>34} {'hub/' + other:>13}")
    for key in keys + ["peak_rss_mib", "cpu_us_per_record"]:
        h, o = summary(hub, key), summary(other, key)
        print(f"{key:<20} {fmt(h):>34} {fmt(o):>34} {h[0] / o[0] if o[0] else float('nan'):>13.2f}")
EOF
