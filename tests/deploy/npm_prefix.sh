#!/usr/bin/env bash
# npm_prefix.sh BINARY_DIR PACKAGE@VERSION [PACKAGE@VERSION...]
# Prints an npm prefix (BINARY_DIR/npm/<first package>) holding the packages,
# installing them once. ctest may run tests in parallel: the install runs
# under flock and leaves a marker when complete.
set -euo pipefail
BIN="$1"
shift
prefix="$BIN/npm/$1"
mkdir -p "$BIN/npm"
marker="$prefix/.installed-$(echo "$*" | tr ' /' '_+')"
flock "$prefix.lock" bash -c '
  test -f "$1" && exit 0
  mkdir -p "$2"
  npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$2" "${@:3}" >&2
  touch "$1"
' _ "$marker" "$prefix" "$@"
echo "$prefix"
