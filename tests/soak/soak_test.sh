#!/usr/bin/env bash
# Chaos soak (ctest label "soak", `make soak`; docs/soak.md). Starts
# dikkat-server on 127.0.0.1 with a bearer token, small limits and its
# OpenAI-compatible port, then:
#   1. dikkat-soak --mode=soak: quiet and chaos windows, then an overload
#      phase (DURATION is the time in chaos windows);
#   2. dikkat-soak --mode=restart while the server is SIGKILLed and started
#      again on the same ports;
#   3. dikkat-soak --mode=drain while the server gets SIGTERM: it must exit 0
#      within the grace period.
# Any failure, a crash or a sanitizer report in a server's log fails the run.
#
#   soak_test.sh SERVER SOAK MODEL_DIR DURATION [extra dikkat-soak flags...]
# SOAK_QUIET / SOAK_ROUNDS / SOAK_OVERLOAD (environment) override the soak's
# --quiet / --rounds / --overload.
set -euo pipefail
SERVER="$1"; SOAK="$2"; MODEL="$3"; DURATION="$4"; shift 4

TMP="$(mktemp -d)"
SERVER_PID=""
SOAK_PID=""
cleanup() {
  [ -n "$SOAK_PID" ] && kill -TERM "$SOAK_PID" 2>/dev/null || true
  [ -n "$SERVER_PID" ] && kill -TERM "$SERVER_PID" 2>/dev/null || true
  [ -n "$SERVER_PID" ] && wait "$SERVER_PID" 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
SANITIZER_RE='runtime error:|ERROR: [A-Za-z]+Sanitizer|WARNING: ThreadSanitizer'
fail() {
  echo "FAIL: $*" >&2
  for log in "$TMP"/server*.err; do
    [ -f "$log" ] || continue
    echo "--- $(basename "$log")" >&2
    # A sanitizer report's head (what and where) matters more than its tail.
    if grep -qE "$SANITIZER_RE" "$log"; then
      grep -m1 -A40 -E "$SANITIZER_RE" "$log" >&2
    else
      tail -20 "$log" >&2 || true
    fi
  done
  exit 1
}
stamp() { echo "soak_test: $* (at ${SECONDS} s)"; }

# 32 hex characters; the server reads it from the environment.
TOKEN="$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')"
# Limits the mix runs into: --max_message_bytes (oversized requests),
# --max_stream_pending_bytes (slow readers), --max_queue (overload bursts).
# The pending bound counts output not yet handed to the transport, which
# grows when the server's own gRPC threads are slow to write, too: it must
# exceed a whole well-behaved stream's output (a 200-token stream is ~30 KB;
# with 16 KiB, 7 of 1612 of them were cut in a 6-minute run on a loaded
# machine). A bulky slow reader's 480 tokens with 20 alternatives are ~150 KB.
# The KV cache (4 MiB = 256 blocks of 16 tokens) holds the quiet and chaos
# windows' calls; the bursts of the overload phase overflow it (preemption).
SERVER_FLAGS=(--model="$MODEL" --threads=1 --max_queue=128 --kv_cache_bytes=16MiB
  --max_batch_size=64 --grace_period=5s --max_message_bytes=1MiB
  --max_stream_pending_bytes=32KiB)

# start_server N GRPC_LISTEN METRICS_LISTEN OPENAI_LISTEN: server N's log is
# server$N.{out,err}.
start_server() {
  local n="$1" listen="$2" metrics="$3" openai="$4"
  DIKKAT_AUTH_TOKEN="$TOKEN" "$SERVER" "${SERVER_FLAGS[@]}" --listen="$listen" \
    --metrics_listen="$metrics" --openai_listen="$openai" \
    > "$TMP/server$n.out" 2> "$TMP/server$n.err" &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    grep -q 'serving ' "$TMP/server$n.err" && grep -q '^listening on ' "$TMP/server$n.out" &&
      grep -q 'openai on http://' "$TMP/server$n.err" && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# wait_for_line FILE PID: until FILE says "load running" (or PID has ended).
wait_for_line() {
  for _ in $(seq 1 300); do
    grep -q '^load running' "$1" && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

stamp "start"
start_server 1 127.0.0.1:0 127.0.0.1:0 127.0.0.1:0 || fail "dikkat-server exited at start"
GRPC="$(sed -n 's/^listening on //p' "$TMP/server1.out")"
METRICS="$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$TMP/server1.err")"
OPENAI="$(sed -n 's|.*openai on http://\([^/]*\)/v1.*|\1|p' "$TMP/server1.err")"
[ -n "$GRPC" ] && [ -n "$METRICS" ] && [ -n "$OPENAI" ] || fail "no addresses from dikkat-server"
COMMON=(--target="$GRPC" --metrics="$METRICS" --token="$TOKEN")

# 1. Quiet / chaos / overload.
stamp "chaos soak"
"$SOAK" "${COMMON[@]}" --openai="$OPENAI" --duration="$DURATION" --quiet="${SOAK_QUIET:-9s}" \
  --rounds="${SOAK_ROUNDS:-3}" --overload="${SOAK_OVERLOAD:-6s}" "$@" ||
  fail "dikkat-soak (chaos)"

# 2. kill -9 and a restart on the same ports while clients retry.
stamp "kill -9 and restart"
"$SOAK" "${COMMON[@]}" --mode=restart --workers=32 --duration=60s "$@" \
  > "$TMP/restart.out" 2>&1 &
SOAK_PID=$!
wait_for_line "$TMP/restart.out" "$SOAK_PID" || { cat "$TMP/restart.out"; fail "restart load"; }
sleep 1
kill -KILL "$SERVER_PID"
wait "$SERVER_PID" 2>/dev/null || true
SERVER_PID=""
grep -qE "$SANITIZER_RE" "$TMP/server1.err" && fail "sanitizer report in the first server's log"
sleep 1  # an outage the clients notice
# The port is free at once (gRPC and httplib bind with SO_REUSEADDR); retry
# in case a client's outgoing connection took the number meanwhile.
started=""
for _ in 1 2 3 4 5; do
  if start_server 2 "$GRPC" "$METRICS" "$OPENAI"; then started=1; break; fi
  [ -n "$SERVER_PID" ] && wait "$SERVER_PID" 2>/dev/null || true
  sleep 0.5
done
[ -n "$started" ] || fail "dikkat-server did not start again on $GRPC / $METRICS / $OPENAI"
stamp "restarted"
wait "$SOAK_PID" || { cat "$TMP/restart.out"; SOAK_PID=""; fail "dikkat-soak (restart)"; }
SOAK_PID=""
cat "$TMP/restart.out"

# 3. SIGTERM under load: the drain.
stamp "drain under load"
"$SOAK" "${COMMON[@]}" --mode=drain --workers=64 --duration=30s "$@" > "$TMP/drain.out" 2>&1 &
SOAK_PID=$!
wait_for_line "$TMP/drain.out" "$SOAK_PID" || { cat "$TMP/drain.out"; fail "drain load"; }
term_at=$SECONDS
kill -TERM "$SERVER_PID"
status=0
wait "$SERVER_PID" || status=$?
SERVER_PID=""
drain_s=$(( SECONDS - term_at ))
[ "$status" -eq 0 ] || fail "dikkat-server exited with status $status after SIGTERM"
# --grace_period=5s, plus up to 2 s for the transport and the metrics port.
[ "$drain_s" -le 8 ] || fail "the drain took ${drain_s} s (grace period 5 s)"
grep -q 'dikkat-server: stopped' "$TMP/server2.err" || fail "no clean stop"
wait "$SOAK_PID" || { cat "$TMP/drain.out"; SOAK_PID=""; fail "dikkat-soak (drain)"; }
SOAK_PID=""
cat "$TMP/drain.out"
echo "server exit after SIGTERM under load: status 0 in ${drain_s} s"
# Sanitizer builds: a report that did not stop the server still fails the run.
if grep -qE "$SANITIZER_RE" "$TMP/server2.err"; then
  fail "sanitizer report in the server's log"
fi
stamp "soak passed"
