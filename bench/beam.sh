#!/usr/bin/env bash
# Beam search against greedy decoding at batch 4 (docs/performance.md, "Beam
# search"), in one run on one server: an encoder-decoder of the "Attention Is
# All You Need" base shape (d_model 512, 6 + 6 layers, 8 heads; random
# weights, byte tokenizer), a 32-byte source, 64 new tokens, ignore_eos.
#   beam:   one call with beam_width = 4: 4 x 64 beam tokens decoded;
#   greedy: 4 concurrent greedy calls of the same source (`dikkat bench`).
# Tokens/s is decoded tokens over the server's total time of the call(s)
# (beam: beam tokens; greedy: generated tokens). Target: beam >= 0.5x greedy.
# ROUNDS rounds interleaved; medians.
#
#   bench/beam.sh [BUILD_DIR] [ROUNDS]     -> $BUILD_DIR/bench/results/beam.json
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${BUILD_DIR:-build}}
ROUNDS=${2:-5}
THREADS=${BENCH_THREADS:-2}
MODEL=$BUILD/bench/seq2seq-base
OUT=$BUILD/bench/results
mkdir -p "$OUT"
if [ ! -f "$MODEL/model.safetensors" ]; then
  /usr/bin/python3 tools/make_tiny_model.py "$MODEL" --arch encoder-decoder --d-model 512 \
    --layers 6 --heads 8 --max-positions 256
fi
SOURCE="The quick brown fox jumps over a"
. bench/lib.sh
bench_start_server "$BUILD" "$MODEL" --kv_cache_bytes=256MiB
CLI=("$BUILD/client/dikkat" --target="$BENCH_ADDR" --timeout=600)

: > "$OUT/beam.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  beam=$("${CLI[@]}" generate --show-stats --prompt="$SOURCE" --beam-width=4 --max-tokens=64 \
    --ignore-eos 2>&1 >/dev/null | sed -n 's/^server: .*total \([0-9.]*\) s.*/\1/p')
  report=$("${CLI[@]}" bench --concurrency=4 --requests=4 --max-tokens=64 --temperature=0 \
    --ignore-eos --warmup=0 --prompt="$SOURCE")
  greedy=$(sed -n 's/^throughput: \([0-9.]*\) generated tokens\/s.*/\1/p' <<< "$report")
  echo "{\"round\": $round, \"beam4_total_s\": $beam, \"greedy4_tokens_per_s\": $greedy}" \
    | tee -a "$OUT/beam.jsonl"
done
/usr/bin/python3 - "$OUT/beam.jsonl" "$OUT/beam.json" <<'PY'
import json, statistics, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True,
                     text=True).stdout.strip()
beam = [4 * 64 / r["beam4_total_s"] for r in rows]
ratios = [b / r["greedy4_tokens_per_s"] for b, r in zip(beam, rows)]
out = {"cpu": cpu, "rounds": len(rows), "beam4_tokens_per_s": statistics.median(beam),
       "greedy4_tokens_per_s": statistics.median(r["greedy4_tokens_per_s"] for r in rows),
       "ratio": statistics.median(ratios), "ratios": ratios}
json.dump(out, open(sys.argv[2], "w"), indent=1)
print(f"beam search ({cpu}, medians of {len(rows)} rounds): beam 4 {out['beam4_tokens_per_s']:.1f} "
      f"beam tokens/s vs greedy batch 4 {out['greedy4_tokens_per_s']:.1f} tokens/s: "
      f"{out['ratio']:.2f}x (target >= 0.5x)")
PY
