#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need
# (scripts/install-test-tools.sh), then runs every test of the workspace with
# HUBHOST_REQUIRE_TOOLS=1, so a test whose tool is missing fails instead of being skipped. The
# tests start their own services (Azurite, hubhost processes) on free loopback ports and stop them.
# Arguments go to `cargo test` (e.g. a test name filter), which then runs in one lane.
#
# Without arguments the tests are built once, then run in three lanes at once, each one binary
# at a time as `cargo test` runs them:
# - "timed": the binaries that time themselves and mostly wait (a soak in real time, pools at
#   the SDKs' 30 s cycles, the chaos rig, the hub beside the SDKs, attacks under latency
#   bounds, the short benchmarks with their handoff and latency bounds), at normal priority,
#   so their processes get the CPU when they ask for it; and the official clients of other
#   languages (`clients`: JVMs, processors, the hub beside Kafka's broker and Artemis at full
#   load), which here run one binary at a time with the others instead of beside them, where
#   their load would take the CPU the others' bounds need;
# - "rest": everything else (the pipeline, the peers, the page, each crate's tests, the
#   examples in the documentation), under `nice -n 5`: busy, but with no bound on time that
#   the CPU it yields could break;
# - "builds": the tests that build (new projects from scratch, installs, packages for the
#   Functions images: both cores for minutes), under `nice -n 10`, taking what the others leave:
#   the docs, and the modules of the cli tests named in `cli_builds`. The cli tests' other
#   modules (the demo, checkpoints, the deployment's files) run in the rest lane: a bounded
#   demo waits for its pool to catch up, and starved at `nice -n 10` beside three builds it
#   could not.
# Tests that need a fixed port take turns on it across the lanes (the test kit's
# `hold_fixed_ports`). The timings behind the split are in docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-test-tools.sh
export HUBHOST_REQUIRE_TOOLS=1

if [ $# -gt 0 ]; then
  echo "== cargo test $*"
  cargo test --workspace --all-targets "$@"
  exit 0
fi

timed=(hostile_clients hub pool scale bench_soak chaos bench_pool bench_latency_cost clients)
builds=(docs cli)
# The modules of the cli tests that build; the rest lane runs the cli's others.
cli_builds=(new_project:: dev_loop:: package::)

# Every target, the examples' executables included (the tests that run one build it with this
# same command, which then has nothing to do): one selection of packages and targets, so every
# dependency is compiled once, with the features the whole workspace asks of it.
echo "== cargo build --workspace --all-targets (every test and executable, built once for the lanes)"
cargo build --workspace --all-targets

# Every integration test target of the workspace in neither list above: a new test file joins
# the rest lane without being named here.
mapfile -t rest < <(
  cargo metadata --format-version 1 --no-deps --offline |
    jq -r '.packages[].targets[] | select(.kind == ["test"]) | .name' | sort -u
)
for name in "${timed[@]}" "${builds[@]}"; do
  found=0
  for i in "${!rest[@]}"; do
    if [ "${rest[$i]}" = "$name" ]; then
      unset 'rest[i]'
      found=1
    fi
  done
  if [ "$found" = 0 ]; then
    echo "scripts/test.sh: a lane names a test target '$name' the workspace lacks" >&2
    exit 1
  fi
done

as_tests() { for name in "$@"; do printf -- '--test\n%s\n' "$name"; done; }
mapfile -t timed_args < <(as_tests "${timed[@]}")
mapfile -t rest_args < <(as_tests "${rest[@]}")
cli_skips=()
for module in "${cli_builds[@]}"; do cli_skips+=(--skip "$module"); done

# One lane: its label before every line it prints, its status and its own log in files named
# for it.
lanes=$(mktemp -d)
trap 'rm -rf "$lanes"' EXIT
lane() {
  local name=$1 niceness=$2
  shift 2
  local started=$SECONDS status=0
  nice -n "$niceness" "$@" 2>&1 | tee "$lanes/$name.log" |
    sed -u "s/^/$(printf '%-6s' "$name") | /" || status=$?
  echo "$status" > "$lanes/$name"
  # The CPU time the lane's processes took (user and system, of every process its commands
  # waited for): the suite is bound by CPU on 2 cores, so this is what a change to it moves.
  # (`times` itself, not in a `$(…)` subshell, which has no children of its own.)
  local cpu
  times > "$lanes/$name.times"
  cpu=$(awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); n += t[1] * 60 + t[2] } printf "%d", n }' "$lanes/$name.times")
  echo "== lane $name finished after $((SECONDS - started)) s, $cpu s of CPU (status $status)"
}

echo "== three lanes: timed (${timed[*]}) | builds (docs, cli's ${cli_builds[*]}) | rest (unit tests, ${rest[*]}, cli's others, doc tests)"
lane timed 0 cargo test --workspace --no-fail-fast "${timed_args[@]}" &
lane builds 10 bash -c 'status=0
  cargo test --workspace --no-fail-fast --test cli -- "$@" || status=$?
  cargo test --workspace --no-fail-fast --test docs || status=$?
  exit "$status"' builds "${cli_builds[@]}" &
# --all-targets leaves out the examples in the documentation; they run here.
lane rest 5 bash -c 'status=0
  cargo test --workspace --no-fail-fast --lib --bins "${@:2:$1}" || status=$?
  cargo test --workspace --no-fail-fast --test cli -- "${@:$1+2}" || status=$?
  cargo test --workspace --doc || status=$?
  exit "$status"' rest "${#rest_args[@]}" "${rest_args[@]}" "${cli_skips[@]}" &
wait

# A failed lane's failures again, last, where a reader of the log's tail finds them: the tests
# that failed, each panic with the lines after it (the message; a test's own output, which can
# be long, stays above), and cargo's closing errors.
failed=0
for name in timed builds rest; do
  if [ "$(cat "$lanes/$name")" != 0 ]; then
    echo "== lane $name failed; its failures:" >&2
    log=$lanes/$name.log
    grep -E '^test .* FAILED$' "$log" >&2 || true
    # Each panic's message, to its end (a blank line or the backtrace): a peer's traceback
    # ends with the exception that matters.
    awk '/panicked at/ { n = 40 }
         n > 0 && (/^$/ || /^(stack backtrace:|note: )/) { n = 0 }
         n > 0 { print; n-- }' "$log" | head -n 200 >&2 || true
    grep -E '^error(\[|:)' "$log" | head -n 40 >&2 || true
    failed=1
  fi
done
exit "$failed"
