#!/usr/bin/env bash
# The OpenAI-compatible port against gRPC (docs/performance.md, "The
# OpenAI-compatible port"), in one run on one server: the GPT-2-small bench
# model (byte tokenizer) with a ChatML chat template, greedy, EOS ignored.
#   8 streams: streamed chat completions through HTTP (`dikkat bench
#              --openai-chat`) against gRPC Generate streams of the prompt the
#              template renders (the same tokens): generated tokens/s, 32
#              requests x 96 tokens per door and round (~15 s).
#              Target: HTTP >= 95% of gRPC.
#   1 stream:  time to first token of a streamed completion through HTTP
#              (request sent -> first event naming a token) against gRPC's
#              (request sent -> first message carrying a token), the same
#              prompt, both asking for the tokens' log-probabilities: the
#              bench model's random weights pick tokens that are no text
#              (ids past the byte tokenizer's 256), and an OpenAI stream
#              sends no event for a token without text unless its logprobs
#              were asked for. Target: HTTP within 2 ms of gRPC.
# ROUNDS rounds; the order of the two doors alternates every round; medians.
#
#   bench/openai.sh [BUILD_DIR] [ROUNDS]     -> $BUILD_DIR/bench/results/openai.json
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-${BUILD_DIR:-build}}
ROUNDS=${2:-5}
THREADS=${BENCH_THREADS:-2}
OUT=$BUILD/bench/results
mkdir -p "$OUT"
. bench/lib.sh
bench_gpt2_small "$BUILD/bench/gpt2-small"

# The bench model with a chat template: its files linked, a tokenizer_config.json added.
MODEL=$BUILD/bench/gpt2-small-chat
mkdir -p "$MODEL"
for f in "$BUILD"/bench/gpt2-small/*; do ln -sf "$(realpath "$f")" "$MODEL/$(basename "$f")"; done
cat > "$MODEL/tokenizer_config.json" <<'EOF'
{"chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}
EOF
USER_TEXT="The quick brown "
RENDERED=$(printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$USER_TEXT")

bench_start_server "$BUILD" "$MODEL" --kv_cache_bytes=512MiB --openai_listen=127.0.0.1:0
for _ in $(seq 1 100); do grep -q "openai on http" "$BENCH_LOG" && break; sleep 0.1; done
HTTP=$(sed -n 's|^dikkat-server: openai on \(http://[^/]*\)/v1$|\1|p' "$BENCH_LOG")
[ -n "$HTTP" ] || { echo "no OpenAI port in the server's log" >&2; cat "$BENCH_LOG" >&2; exit 1; }
CLI=("$BUILD/client/dikkat" --target="$BENCH_ADDR" --timeout=600)
COMMON=(--temperature=0 --ignore-eos --warmup=1)

# tokens/s and p50 time to first token of one `dikkat bench` report
field() { sed -n "s/^throughput: \([0-9.]*\) generated.*/\1/p" "$1"; }
ttft() { awk '/^time to first token/ {print $5}' "$1"; }  # the p50

tmp=$(mktemp -d)
: > "$OUT/openai.jsonl"
for round in $(seq 1 "$ROUNDS"); do
  grpc8() { "${CLI[@]}" bench --concurrency=8 --requests=32 --max-tokens=96 "${COMMON[@]}" --prompt="$RENDERED" > "$tmp/g8"; }
  http8() { "${CLI[@]}" bench --openai="$HTTP" --openai-chat --concurrency=8 --requests=32 --max-tokens=96 "${COMMON[@]}" --prompt="$USER_TEXT" > "$tmp/h8"; }
  grpc1() { "${CLI[@]}" bench --concurrency=1 --requests=12 --max-tokens=8 --logprobs=0 "${COMMON[@]}" --prompt="$RENDERED" > "$tmp/g1"; }
  http1() { "${CLI[@]}" bench --openai="$HTTP" --concurrency=1 --requests=12 --max-tokens=8 --logprobs=0 "${COMMON[@]}" --prompt="$RENDERED" > "$tmp/h1"; }
  if [ $((round % 2)) -eq 1 ]; then grpc8; http8; grpc1; http1; else http8; grpc8; http1; grpc1; fi
  printf '{"round": %d, "grpc_8_tok_s": %s, "http_chat_8_tok_s": %s, "grpc_1_ttft_ms": %s, "http_1_ttft_ms": %s}\n' \
    "$round" "$(field "$tmp/g8")" "$(field "$tmp/h8")" "$(ttft "$tmp/g1")" "$(ttft "$tmp/h1")" \
    | tee -a "$OUT/openai.jsonl"
done
rm -rf "$tmp"
bench_stop_server

/usr/bin/python3 - "$OUT/openai.jsonl" "$OUT/openai.json" "$(bench_cpu)" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda k: statistics.median(r[k] for r in rows)
ratio = statistics.median(r["http_chat_8_tok_s"] / r["grpc_8_tok_s"] for r in rows)
gap = statistics.median(r["http_1_ttft_ms"] - r["grpc_1_ttft_ms"] for r in rows)
out = {"cpu": sys.argv[3], "rounds": len(rows), "grpc_8_tok_s": med("grpc_8_tok_s"),
       "http_chat_8_tok_s": med("http_chat_8_tok_s"), "http_over_grpc_8": ratio,
       "grpc_1_ttft_ms": med("grpc_1_ttft_ms"), "http_1_ttft_ms": med("http_1_ttft_ms"),
       "http_ttft_minus_grpc_ms": gap, "per_round": rows}
json.dump(out, open(sys.argv[2], "w"), indent=1)
ratios = ", ".join("%.3f" % (r["http_chat_8_tok_s"] / r["grpc_8_tok_s"]) for r in rows)
gaps = ", ".join("%+.2f" % (r["http_1_ttft_ms"] - r["grpc_1_ttft_ms"]) for r in rows)
print("CPU: %s; %d rounds, medians" % (out["cpu"], len(rows)))
print("8 streams: HTTP chat %.1f tokens/s, gRPC %.1f: %.3fx (per round %s; target >= 0.95)"
      % (out["http_chat_8_tok_s"], out["grpc_8_tok_s"], ratio, ratios))
print("1 stream: time to first token HTTP %.2f ms, gRPC %.2f ms: HTTP - gRPC %+.2f ms "
      "(per round %s; target <= 2 ms)" % (out["http_1_ttft_ms"], out["grpc_1_ttft_ms"], gap, gaps))
EOF
