#!/usr/bin/env bash
# Prefix caching, on against off, in one run (docs/performance.md, "Prefix
# caching"): 32 Generate requests at once that share a 400-token prefix and
# end in 16 tokens of their own (a system prompt with distinct questions),
# 16 new tokens each, greedy, through gRPC with `dikkat bench`, on the
# GPT-2-small bench model (byte tokenizer: 1 byte = 1 token).
# ROUNDS rounds, each starting a fresh server with caching on and one with
# --noprefix_caching, interleaved; medians of time to first token (mean over
# the 32 requests) and of generated tokens/s.
#
#   bench/prefix_cache.sh [BUILD_DIR] [ROUNDS]     -> $BUILD_DIR/bench/results/prefix_cache.json
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${BUILD_DIR:-build}}
ROUNDS=${2:-3}
THREADS=${BENCH_THREADS:-2}
MODEL=$BUILD/bench/gpt2-small
OUT=$BUILD/bench/results
mkdir -p "$OUT"
. bench/lib.sh
bench_gpt2_small "$MODEL"
# 400 bytes of text: the shared prefix.
PREFIX=$(/usr/bin/python3 -c 'import sys; s="You are a careful assistant. Answer briefly and cite the rules. "; sys.stdout.write((s*10)[:400])')

run_one() {  # $1: on|off -> "ttft_mean_ms ttft_p50_ms tokens_per_s"
  local flag=""
  [ "$1" = off ] && flag="--noprefix_caching"
  bench_start_server "$BUILD" "$MODEL" --kv_cache_bytes=512MiB $flag || exit 1
  local addr=$BENCH_ADDR
  local report
  report=$("$BUILD/client/dikkat" --target="$addr" --timeout=600 bench --concurrency=32 --requests=32 \
    --max-tokens=16 --temperature=0 --ignore-eos --warmup=0 --prompt="$PREFIX" --unique-suffix=16) || true
  bench_stop_server
  if ! grep -q '^completed: 32 ok, 0 failed' <<< "$report"; then
    echo "prefix_cache.sh: a request failed with caching $1:" >&2
    echo "$report" >&2
    exit 1
  fi
  local tps ttft_p50 ttft_mean
  tps=$(sed -n 's/^throughput: \([0-9.]*\) generated tokens\/s.*/\1/p' <<< "$report")
  read -r ttft_p50 ttft_mean < <(awk '/^time to first token/ {print $5, $8}' <<< "$report")
  echo "$ttft_mean $ttft_p50 $tps"
}

: > "$OUT/prefix_cache.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  for mode in on off; do
    result=$(run_one $mode) || exit 1
    read -r mean p50 tps <<< "$result"
    echo "{\"round\": $round, \"caching\": \"$mode\", \"ttft_mean_ms\": $mean, \"ttft_p50_ms\": $p50, \"tokens_per_s\": $tps}" \
      | tee -a "$OUT/prefix_cache.jsonl"
  done
done
/usr/bin/python3 - "$OUT/prefix_cache.jsonl" "$OUT/prefix_cache.json" <<'EOF'
import json, statistics, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(mode, key):
    return statistics.median(r[key] for r in rows if r["caching"] == mode)
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True,
                     text=True).stdout.strip()
out = {"cpu": cpu, "rounds": len(rows) // 2}
for key in ("ttft_mean_ms", "ttft_p50_ms", "tokens_per_s"):
    out[key] = {"on": med("on", key), "off": med("off", key)}
out["ttft_ratio"] = out["ttft_mean_ms"]["off"] / out["ttft_mean_ms"]["on"]
out["throughput_ratio"] = out["tokens_per_s"]["on"] / out["tokens_per_s"]["off"]
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(f"prefix caching ({cpu}, medians of {out['rounds']} rounds): "
      f"time to first token {out['ttft_mean_ms']['off']:.0f} -> {out['ttft_mean_ms']['on']:.0f} ms "
      f"({out['ttft_ratio']:.1f}x lower), throughput {out['tokens_per_s']['off']:.1f} -> "
      f"{out['tokens_per_s']['on']:.1f} tokens/s ({out['throughput_ratio']:.2f}x)")
EOF
