#!/usr/bin/env bash
# The fresh-resolution check: does hubhost still build and pass its tests with the newest
# versions of its dependencies that its manifests allow? That is what a project gets that
# depends on our crates without our Cargo.lock (`cargo add`), and what `cargo install` without
# `--locked` builds. CI tests the versions users get from us (the workspace's lock, the lock
# `hubhost new` writes, `--locked` installs); this check sees what upstream publishes next.
#
# In a scratch copy of this checkout (tracked files and uncommitted edits; not target/ or
# .tools/), it resolves every dependency afresh and then, each step in its own target folder:
#   1. builds the workspace (every target) and runs its unit tests;
#   2. makes a project with `hubhost new`, deletes its Cargo.lock and runs `cargo test` there;
#   3. installs the command line with `cargo install --path .` (no --locked).
# When a step fails it names the crate that did not compile and what the resolution changed.
#
# Usage: scripts/fresh-resolution.sh [--full] [--keep]
#   --full  run every test of the workspace in step 1 (`cargo test --workspace`), not only the
#           unit tests
#   --keep  leave the scratch folder for a look (it is printed)
# Run it whenever dependencies change, and report its result with the change. It needs a network
# to the crate registry and takes about 15 minutes on 2 cores.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
full=0
keep=0
for arg in "$@"; do
  case "$arg" in
    --full) full=1 ;;
    --keep) keep=1 ;;
    *) echo "usage: $0 [--full] [--keep]" >&2; exit 2 ;;
  esac
done

scratch=$(mktemp -d "${TMPDIR:-/tmp}/hubhost-fresh.XXXXXX")
if [ "$keep" = 0 ]; then
  trap 'rm -rf "$scratch"' EXIT
fi
copy="$scratch/hubhost"
mkdir -p "$copy"
# The checkout as it is now, edits included, without build output or installed tools.
(cd "$repo" && git ls-files -z --cached --others --exclude-standard \
  | while IFS= read -r -d '' file; do [ -e "$file" ] && printf '%s\0' "$file"; done \
  | xargs -0 cp --parents -t "$copy")
echo "== scratch copy: $copy"

# The crates a failed build names, each with its version and what the resolution changed: the
# crate itself, or the dependencies of it that were updated.
culprits() {
  local log=$1
  grep -oE 'could not compile `[^`]+`' "$log" | sort -u | while read -r _ _ _ crate; do
    crate=${crate//\`/}
    local version
    version=$(grep -oE "/${crate}-[0-9][^/]*/src/" "$log" | head -1 | sed -E "s|/${crate}-(.*)/src/|\1|")
    echo "   broke: ${crate} ${version}"
    local own
    own=$(grep -E "^ *(Updating|Adding|Downgrading) ${crate} " "$scratch/update.log" || true)
    [ -n "$own" ] && echo "     the resolution changed it: $(echo "$own" | xargs)"
    grep -E '^ *(Updating|Adding|Downgrading) ' "$scratch/update.log" | while read -r _ updated _ _ new; do
      if cargo tree --offline -i "${updated}@${new#v}" --depth 1 -e normal,build 2>/dev/null \
        | grep -qE "^[├└]── ${crate} v${version}"; then
        echo "     it depends on ${updated}, which the resolution moved to ${new}"
      fi
    done
  done
}

step() {
  local name=$1; shift
  local log="$scratch/$(echo "$name" | tr ' ' '-').log"
  echo "== $name: $*"
  if ! "$@" >"$log" 2>&1; then
    echo "FAILED: $name (log: $log)"
    culprits "$log"
    grep -E '^error' -A8 "$log" | head -40
    keep=1
    trap - EXIT
    echo "the scratch folder is kept: $scratch"
    exit 1
  fi
}

cd "$copy"
echo "== cargo update (the newest versions the manifests allow)"
cargo update 2>&1 | tee "$scratch/update.log" | grep -E '^ *(Updating|Adding|Removing|Downgrading)' || echo "   (nothing newer)"

export CARGO_TARGET_DIR="$scratch/target"
step "workspace build" cargo build --workspace --all-targets --keep-going
if [ "$full" = 1 ]; then
  step "workspace tests" cargo test --workspace
else
  step "workspace unit tests" cargo test --workspace --lib --bins
fi

project="$scratch/fresh-function"
step "hubhost new" "$CARGO_TARGET_DIR/debug/hubhost" new "$project" --function CountEvents
rm -f "$project/Cargo.lock"
(cd "$project" && cargo generate-lockfile >/dev/null 2>&1)
step "new project: cargo test" env CARGO_TARGET_DIR="$scratch/target-project" \
  cargo test --manifest-path "$project/Cargo.toml"

step "cargo install (not locked)" env CARGO_TARGET_DIR="$scratch/target-install" \
  cargo install --path . --root "$scratch/installed"

echo "== passed: the workspace, a new project and an install build and test with today's newest versions"
