# Shared by the bench/*.sh scripts that measure a running dikkat-server
# through gRPC (source it; it defines functions only).

# Writes the GPT-2-small-shaped bench model (random weights, byte tokenizer)
# to $1 unless it is there.
bench_gpt2_small() {
  [ -f "$1/model.safetensors" ] && return 0
  /usr/bin/python3 tools/make_tiny_model.py "$1" --d-model 768 --layers 12 --heads 12 \
    --max-positions 1024 --vocab 50257
}

# bench_start_server BUILD MODEL [server flags...]: starts a server on a free
# port with --threads=$THREADS and waits until it serves. Sets BENCH_PID and
# BENCH_ADDR (host:port); bench_stop_server stops it (also on exit).
bench_start_server() {
  local build=$1 model=$2
  shift 2
  BENCH_LOG=$(mktemp)
  "$build/server/dikkat-server" --model="$model" --listen=127.0.0.1:0 --metrics_listen= \
    --threads="${THREADS:-2}" "$@" > "$BENCH_LOG" 2>&1 &
  BENCH_PID=$!
  trap bench_stop_server EXIT
  for _ in $(seq 1 600); do grep -q "serving" "$BENCH_LOG" && break; sleep 0.1; done
  BENCH_ADDR=$(sed -n 's/^listening on //p' "$BENCH_LOG")
  if [ -z "$BENCH_ADDR" ]; then
    echo "the server did not start:" >&2
    cat "$BENCH_LOG" >&2
    return 1
  fi
}

bench_stop_server() {
  if [ -n "${BENCH_PID:-}" ]; then
    kill -TERM "$BENCH_PID" 2>/dev/null || true
    wait "$BENCH_PID" 2>/dev/null || true
    BENCH_PID=
  fi
  rm -f "${BENCH_LOG:-}"
  trap - EXIT
}

# The CPU's model name, for the reports.
bench_cpu() { lscpu | sed -n 's/^Model name: *//p'; }
