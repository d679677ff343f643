#!/usr/bin/env bash
# The OpenAI-compatible port of a real dikkat-server called by clients we did
# not write: the official `openai` npm package and curl, next to the dikkat
# CLI over gRPC (openai_client_test.mjs says what is checked).
#   openai_client_test.sh SERVER CLI SOURCE_DIR BINARY_DIR
# Needs node, npm and curl (scripts/install-deps.sh); the npm package is
# installed once per build directory (tests/deploy/npm_prefix.sh).
set -euo pipefail
SERVER="$1"
CLI="$2"
SRC="$3"
BIN="$4"
# The newest `openai` whose package allows the Node.js of this machine kind
# (v20) and Debian's own nodejs (18): 7.x requires Node >= 22.
OPENAI_PACKAGE=openai@6.49.0
for tool in node npm curl; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is not installed (scripts/install-deps.sh)" >&2; exit 1; }
done
prefix="$(bash "$SRC/tests/deploy/npm_prefix.sh" "$BIN" "$OPENAI_PACKAGE")"
exec node "$SRC/tests/integration/openai_client_test.mjs" "$prefix" "$SERVER" "$CLI" "$SRC"
