#!/usr/bin/env bash
# Every dependency a package of this workspace declares is used by its code: a crate named in
# [dependencies], [dev-dependencies] or [build-dependencies] must appear as a path
# (`name::…`, `use name`, `name!`) in the package's own sources (src/, tests/, benches/,
# examples/, build.rs). The check cargo-machete makes, without installing it: a grep, so
# it runs in a second and needs nothing but the checkout.
#
# A dependency used without its name in the code (a bound on a version Cargo picks for the
# whole build, a feature switched on for another crate) is listed in the package's manifest as
# cargo-machete reads it, with the reason beside it:
#
#   [package.metadata.cargo-machete]
#   # why
#   ignored = ["name"]
#
# Usage: scripts/unused-deps.sh   (exit 1 and one line per unused dependency when any is)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

status=0
for manifest in Cargo.toml crates/*/Cargo.toml examples/*/Cargo.toml; do
  [ -f "$manifest" ] || continue
  dir=$(dirname "$manifest")
  grep -q '^\[package\]' "$manifest" || continue
  # The names in the dependency tables (`name.workspace = true`, `name = "1"`, `name = { … }`).
  deps=$(awk '
    /^\[/ { in_deps = ($0 ~ /^\[(dev-|build-)?dependencies\]$/) ; next }
    in_deps && /^[A-Za-z0-9_-]+ *(\.|=)/ { sub(/[ .=].*/, ""); print }
  ' "$manifest" | sort -u)
  allowed=$(awk '
    /^\[package\.metadata\.cargo-machete\]/ { in_meta = 1; next }
    /^\[/ { in_meta = 0 }
    in_meta && /^ignored/ { print }
  ' "$manifest" | grep -oE '"[^"]+"' | tr -d '"' || true)
  sources=()
  for part in src tests benches examples build.rs; do
    [ -e "$dir/$part" ] && sources+=("$dir/$part")
  done
  for dep in $deps; do
    if grep -qx -- "$dep" <<<"$allowed"; then
      continue
    fi
    # The library name: `package = "…"` renames are not used here; dashes become underscores.
    lib=${dep//-/_}
    if ! grep -rqE --include='*.rs' "(^|[^A-Za-z0-9_])${lib}(::|!| *;| as )" "${sources[@]}"; then
      echo "unused dependency: ${dep} in ${manifest}"
      status=1
    fi
  done
done
if [ "$status" = 0 ]; then
  echo "unused-deps: every declared dependency is used"
fi
exit "$status"
