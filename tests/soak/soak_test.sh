#!/usr/bin/env bash
# Soak under faults (ctest label "soak"): starts dikkat-server on 127.0.0.1
# with a small queue and KV cache (so bursts overflow the queue and long
# streams get preempted), runs dikkat-soak against it, then stops the server
# with SIGTERM and requires a clean exit.
#
#   soak_test.sh SERVER SOAK MODEL_DIR DURATION [extra dikkat-soak flags...]
set -euo pipefail
SERVER="$1"; SOAK="$2"; MODEL="$3"; DURATION="$4"; shift 4

TMP="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  [ -n "$SERVER_PID" ] && kill -TERM "$SERVER_PID" 2>/dev/null || true
  [ -n "$SERVER_PID" ] && wait "$SERVER_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  # A sanitizer report's head (what and where) matters more than its tail.
  if grep -qE 'runtime error:|Sanitizer' "$TMP/server.err" 2>/dev/null; then
    grep -m1 -A40 -E 'runtime error:|ERROR: [A-Za-z]+Sanitizer|WARNING: ThreadSanitizer' \
      "$TMP/server.err" >&2
  else
    tail -20 "$TMP/server.err" >&2 || true
  fi
  exit 1
}

"$SERVER" --model="$MODEL" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --threads=1 \
  --max_queue=64 --kv_cache_bytes=512KiB --max_batch_size=32 --grace_period=5s \
  > "$TMP/server.out" 2> "$TMP/server.err" &
SERVER_PID=$!
for _ in $(seq 1 600); do
  grep -q '^listening on ' "$TMP/server.out" && grep -q 'metrics on http://' "$TMP/server.err" \
    && grep -q 'serving ' "$TMP/server.err" && break
  kill -0 "$SERVER_PID" 2>/dev/null || fail "dikkat-server exited at start"
  sleep 0.1
done
GRPC="$(sed -n 's/^listening on //p' "$TMP/server.out")"
METRICS="$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$TMP/server.err")"
[ -n "$GRPC" ] && [ -n "$METRICS" ] || fail "no addresses from dikkat-server"

"$SOAK" --target="$GRPC" --metrics="$METRICS" --duration="$DURATION" "$@" || fail "dikkat-soak"

kill -TERM "$SERVER_PID"
wait "$SERVER_PID" || fail "dikkat-server exited with status $? after SIGTERM"
SERVER_PID=""
grep -q 'dikkat-server: stopped' "$TMP/server.err" || fail "no clean stop"
# Sanitizer builds: a report that did not stop the server still fails the run.
if grep -qE 'runtime error:|ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer' \
    "$TMP/server.err"; then
  fail "sanitizer report in the server's log"
fi
echo "soak passed"
