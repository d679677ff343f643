#!/usr/bin/env bash
# Validates deploy/kubernetes/ with validate_kubernetes.mjs: the Kubernetes
# OpenAPI schema (npm kubernetes-models) plus the wiring between the objects,
# the real dikkat-server flags and the exported metrics.
#   kubernetes_test.sh SOURCE_DIR BINARY_DIR DIKKAT_SERVER
set -euo pipefail
SRC="$1"
BIN="$2"
SERVER="$3"
here="$(dirname "$0")"
prefix="$(bash "$here/npm_prefix.sh" "$BIN" kubernetes-models@5.1.0 js-yaml@4.1.0)"
node "$SRC/tests/deploy/validate_kubernetes.mjs" "$prefix" "$SRC" "$SERVER"
