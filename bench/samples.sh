#!/usr/bin/env bash
# Several samples of one prompt (docs/performance.md, "Several samples"), in
# one run on one server, GPT-2-small bench model, byte tokenizer:
#   prefill: a fresh 400-token prompt with n = 4 (max 1 new token each)
#            against the same with n = 1: server time to the end of the call.
#            Target: n = 4 costs <= 1.3x (the prompt is computed once; the
#            other samples map it from the prefix cache).
#   decode:  n = 4 x 64 new tokens in one call against 4 separate concurrent
#            calls of the same prompt (`dikkat bench`): generated tokens/s.
#            Target: the samples decode at batched speed (ratio ~1).
# ROUNDS rounds, interleaved; each prompt starts with the round number, so
# nothing is cached across measurements; medians.
#
#   bench/samples.sh [BUILD_DIR] [ROUNDS]     -> $BUILD_DIR/bench/results/samples.json
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${BUILD_DIR:-build}}
ROUNDS=${2:-5}
THREADS=${BENCH_THREADS:-2}
MODEL=$BUILD/bench/gpt2-small
OUT=$BUILD/bench/results
mkdir -p "$OUT"
. bench/lib.sh
bench_gpt2_small "$MODEL"
prompt() {  # $1: a tag that makes the prompt unique -> 400 bytes
  /usr/bin/python3 -c 'import sys; s=sys.argv[1] + " You are a careful assistant. Answer briefly. "; sys.stdout.write((s*20)[:400])' "$1"
}

bench_start_server "$BUILD" "$MODEL" --kv_cache_bytes=512MiB
CLI=("$BUILD/client/dikkat" --target="$BENCH_ADDR" --timeout=600)

server_total() {  # generate flags... -> the server's total seconds of the call
  "${CLI[@]}" generate --show-stats "$@" 2>&1 >/dev/null | sed -n 's/^server: .*total \([0-9.]*\) s.*/\1/p'
}

: > "$OUT/samples.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  one=$(server_total --prompt="$(prompt "r$round-a")" --max-tokens=1 --temperature=1 --ignore-eos --seed=1)
  four=$(server_total --prompt="$(prompt "r$round-b")" --max-tokens=1 --temperature=1 --ignore-eos --seed=1 --n=4)
  long=$("${CLI[@]}" generate --show-stats --prompt="$(prompt "r$round-c")" --max-tokens=64 \
    --temperature=1 --ignore-eos --seed=1 --n=4 2>&1 >/dev/null)
  n4_tokens=$(sed -n 's/^finish: .*generated tokens: \([0-9]*\).*/\1/p' <<< "$long")
  n4_total=$(sed -n 's/^server: .*total \([0-9.]*\) s.*/\1/p' <<< "$long")
  report=$("${CLI[@]}" bench --concurrency=4 --requests=4 --max-tokens=64 --temperature=1 \
    --ignore-eos --warmup=0 --prompt="$(prompt "r$round-d")")
  sep_tps=$(sed -n 's/^throughput: \([0-9.]*\) generated tokens\/s.*/\1/p' <<< "$report")
  echo "{\"round\": $round, \"prefill_n1_s\": $one, \"prefill_n4_s\": $four, \"n4_tokens\": $n4_tokens, \"n4_total_s\": $n4_total, \"separate4_tokens_per_s\": $sep_tps}" \
    | tee -a "$OUT/samples.jsonl"
done
/usr/bin/python3 - "$OUT/samples.jsonl" "$OUT/samples.json" <<'PY'
import json, statistics, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True,
                     text=True).stdout.strip()
prefill = [r["prefill_n4_s"] / r["prefill_n1_s"] for r in rows]
decode = [(r["n4_tokens"] / r["n4_total_s"]) / r["separate4_tokens_per_s"] for r in rows]
out = {"cpu": cpu, "rounds": len(rows),
       "prefill_n4_over_n1": statistics.median(prefill), "prefill_ratios": prefill,
       "n4_tokens_per_s": statistics.median(r["n4_tokens"] / r["n4_total_s"] for r in rows),
       "separate4_tokens_per_s": statistics.median(r["separate4_tokens_per_s"] for r in rows),
       "decode_n4_over_separate4": statistics.median(decode), "decode_ratios": decode}
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(f"samples ({cpu}, medians of {len(rows)} rounds): prefill n=4 / n=1 "
      f"{out['prefill_n4_over_n1']:.2f}x (target <= 1.3x); decode n=4 in one call "
      f"{out['n4_tokens_per_s']:.1f} tokens/s vs 4 separate calls "
      f"{out['separate4_tokens_per_s']:.1f} ({out['decode_n4_over_separate4']:.2f}x)")
PY
