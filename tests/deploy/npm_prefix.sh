#!/usr/bin/env bash
# npm_prefix.sh BINARY_DIR PACKAGE@VERSION [PACKAGE@VERSION...]
# Prints an npm prefix (BINARY_DIR/npm/<first package>) holding the packages,
# installing them once. ctest may run tests in parallel: installs run one at
# a time (one lock for every package: two npm installs side by side once left
# one hanging past its test's timeout, 2026-11-26) and leave a marker when
# complete. A registry connection that stalls is dropped after 30 s and
# retried (npm's default waits 5 minutes, longer than the tests' timeouts).
set -euo pipefail
BIN="$1"
shift
prefix="$BIN/npm/$1"
mkdir -p "$BIN/npm"
marker="$prefix/.installed-$(echo "$*" | tr ' /' '_+')"
flock "$BIN/npm/.install.lock" bash -c '
  test -f "$1" && exit 0
  mkdir -p "$2"
  npm install --no-save --no-audit --no-fund --loglevel=error \
    --fetch-timeout=30000 --fetch-retries=4 --prefix "$2" "${@:3}" >&2
  touch "$1"
' _ "$marker" "$prefix" "$@"
echo "$prefix"
