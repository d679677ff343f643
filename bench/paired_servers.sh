#!/usr/bin/env bash
# Two dikkat-server binaries side by side (e.g. before and after a change):
# same model, flags and client; the servers alternate round by round (the
# order flips every round) so that drift on a noisy machine hits both alike.
# Generate through gRPC with `dikkat bench` (greedy, or TEMPERATURE), 16-token prompt,
# MAX_TOKENS new tokens (default 32; 128 is llama-batched-bench's -ntg in
# bench/isa_peers.sh), at CONCURRENCY concurrent streams (default "1 8 32"),
# with SERVER_FLAGS added to both servers' flags (e.g. --dtype=bfloat16).
# One line per run; take medians.
#
#   [MAX_TOKENS=32] [CONCURRENCY="1 8 32"] [SERVER_FLAGS=...] [TEMPERATURE=0] \
#     bench/paired_servers.sh SERVER_A SERVER_B MODEL_DIR [ROUNDS=3] [CLI=build/client/dikkat]
set -euo pipefail
A=$1 B=$2 MODEL=$3 ROUNDS=${4:-3} CLI=${5:-build/client/dikkat}
THREADS=${BENCH_THREADS:-2}
MAX_TOKENS=${MAX_TOKENS:-32}
TEMPERATURE=${TEMPERATURE:-0}
CONCURRENCY=${CONCURRENCY:-1 8 32}
read -r -a server_flags <<< "${SERVER_FLAGS:-}"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $THREADS threads"
for round in $(seq 1 "$ROUNDS"); do
  order="A B"; [ $((round % 2)) -eq 0 ] && order="B A"
  for which in $order; do
    bin=$A; [ "$which" = B ] && bin=$B
    for c in $CONCURRENCY; do
      LOG=$(mktemp)
      "$bin" --model="$MODEL" --listen=127.0.0.1:0 --metrics_listen= --threads="$THREADS" \
        --kv_cache_bytes=512MiB "${server_flags[@]}" > "$LOG" 2>&1 &
      PID=$!
      for _ in $(seq 1 600); do grep -q "serving" "$LOG" && break; sleep 0.1; done
      ADDR=$(sed -n 's/^listening on //p' "$LOG")
      tps=$("$CLI" --target="$ADDR" bench --concurrency=$c --requests=$((c * 4)) --max-tokens="$MAX_TOKENS" \
        --temperature="$TEMPERATURE" --ignore-eos --warmup=2 --prompt="The quick brown " |
        sed -n 's/^throughput: \([0-9.]*\) generated tokens\/s.*/\1/p')
      kill -TERM $PID; wait $PID 2>/dev/null || true; rm -f "$LOG"
      echo "round=$round server=$which concurrency=$c temperature=$TEMPERATURE flags=${SERVER_FLAGS:-none} tokens_per_s=${tps:-?}"
    done
  done
done
