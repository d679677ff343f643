#!/usr/bin/env bash
# make bench: every benchmark of docs/performance.md in one run, side by side,
# on a GPT-2-small shaped model (random weights, fixed seed):
#   1. machine limits (memory triad, GEMM) and engine microbenchmarks (C++)
#   2. the PyTorch eager baseline on the very same weights file
#   3. in-process engine throughput and the same load through gRPC
#   4. per ISA the CPU can execute, dikkat beside llama.cpp and PyTorch eager
#      (bench/isa_peers.sh; llama.cpp from ../shared/tools/llama.cpp)
# BENCH_PASSES (default 3) passes of all of it, one after another; results in
# $BUILD_DIR/bench/results/pass*/, then bench/report.py writes the medians over
# the passes to docs/benchmark-results.md and the plots in docs/. One pass takes
# ~12 minutes on 2 cores; single passes vary by up to ~35% on shared machines.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD_DIR:-build}
OUT=$BUILD/bench/results
MODEL=$BUILD/bench/gpt2-small
THREADS=${BENCH_THREADS:-2}
PASSES=${BENCH_PASSES:-3}
# The engine benchmarks the report reads. The kernel comparisons
# (BM_SmallBatchLinear, BM_*RowBlocksPaired: ours against the libraries, per
# row count) are for kernel work: run engine_bench with their filter by hand.
FILTER=${BENCH_FILTER:-'^BM_(MemoryTriad|Gemm|Prefill|DecodeStep|DecodeContextCurve|AttentionDecode)/'}
rm -rf "$OUT"
mkdir -p "$OUT"
if ! /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  apt-get install -y -qq --no-install-recommends python3-matplotlib >/dev/null
fi

# Same BLAS kernels for every process: the ones dikkat-server picks itself
# when nothing is set (server/runtime.cc). A machine-wide OPENBLAS_CORETYPE /
# OPENBLAS_L2_SIZE (some CI images pin older kernels) is dropped for this
# command alone unless BENCH_KEEP_BLAS_ENV=1; tests and CI keep theirs.
if [ -z "${BENCH_KEEP_BLAS_ENV:-}" ]; then unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE; fi
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -q avx512bw /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX;
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
# dikkat-server sets this itself (server/runtime.cc); give PyTorch the same.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
echo "bench: OMP_WAIT_POLICY=$OMP_WAIT_POLICY, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}, $THREADS threads, $(nproc) cores"

if [ ! -f "$MODEL/model.safetensors" ]; then
  /usr/bin/python3 tools/make_tiny_model.py "$MODEL" --d-model 768 --layers 12 --heads 12 \
    --max-positions 1024 --vocab 50257
fi

for pass in $(seq 1 "$PASSES"); do
  PASS_OUT=$OUT/pass$pass
  mkdir -p "$PASS_OUT"
  echo "bench: pass $pass of $PASSES: engine microbenchmarks"
  DIKKAT_BENCH_MODEL=$MODEL DIKKAT_BENCH_THREADS=$THREADS "$BUILD/bench/engine_bench" \
    --benchmark_filter="$FILTER" --benchmark_out="$PASS_OUT/engine.json" --benchmark_out_format=json

  echo "bench: PyTorch eager baseline (float32, bfloat16)"
  /usr/bin/python3 bench/pytorch_baseline.py "$MODEL" --threads "$THREADS" > "$PASS_OUT/pytorch_float32.json"
  /usr/bin/python3 bench/pytorch_baseline.py "$MODEL" --threads "$THREADS" --dtype bfloat16 \
    --only-batch1 > "$PASS_OUT/pytorch_bfloat16.json"

  echo "bench: end to end (in-process engine vs gRPC)"
  PROMPT="The quick brown "  # 16 bytes = 16 tokens with the byte tokenizer
  : > "$PASS_OUT/e2e.jsonl"
  for c in 1 8 32; do
    requests=$((c * 4))
    inproc=$("$BUILD/bench/engine_throughput" --model="$MODEL" --concurrency=$c --requests=$requests \
      --max_tokens=32 --prompt_tokens=16 --threads="$THREADS")
    LOG=$(mktemp)
    "$BUILD/server/dikkat-server" --model="$MODEL" --listen=127.0.0.1:0 --metrics_listen= \
      --threads="$THREADS" --kv_cache_bytes=512MiB > "$LOG" 2>&1 &
    SERVER=$!
    for _ in $(seq 1 600); do grep -q "serving" "$LOG" && break; sleep 0.1; done
    ADDR=$(sed -n 's/^listening on //p' "$LOG")
    grpc=$("$BUILD/client/dikkat" --target="$ADDR" bench --concurrency=$c --requests=$requests \
      --max-tokens=32 --temperature=0 --ignore-eos --warmup=2 --prompt="$PROMPT" |
      sed -n 's/^throughput: \([0-9.]*\) generated tokens\/s.*/\1/p')
    kill -TERM $SERVER; wait $SERVER || true; rm -f "$LOG"
    echo "{\"concurrency\": $c, \"inprocess\": $inproc, \"grpc_tokens_per_s\": ${grpc:-0}}" >> "$PASS_OUT/e2e.jsonl"
    echo "  concurrency $c: in-process $inproc, gRPC ${grpc:-?} tokens/s"
  done
done

# Per ISA: dikkat with DIKKAT_ISA forced beside llama.cpp and PyTorch eager,
# interleaved pass by pass (bench/isa_peers.sh; ~5 minutes per ISA and pass).
# BENCH_ISA_PASSES=0 skips it (the report then has no llama.cpp figures).
ISA_PASSES=${BENCH_ISA_PASSES:-$PASSES}
if [ "$ISA_PASSES" -gt 0 ]; then
  bash bench/isa_peers.sh "$BUILD" "$MODEL" "$OUT/isa" "$THREADS" "$ISA_PASSES"
fi

/usr/bin/python3 bench/report.py "$OUT" docs
echo "bench: wrote docs/benchmark-results.md"
