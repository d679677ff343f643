#!/usr/bin/env bash
# Prefill 512 (fp32, GPT-2-small shape, 2 threads, AVX2) side by side in 3
# interleaved rounds: dikkat (engine_bench BM_Prefill), llama.cpp F32 pp512
# (llama-bench, its haswell CPU variant) and PyTorch eager
# (bench/pytorch_baseline.py). Needs a build and the model and GGUF that
# bench/isa_peers.sh prepares (build/bench/gpt2-small, build/bench/llama/).
# usage: bench/prefill_peers.sh   (from the repository root)
set -uo pipefail
cd "$(dirname "$0")/.."
export OPENBLAS_CORETYPE=Haswell
bin=build/bench/llama/bin-avx2
for r in 1 2 3; do
  d=$(DIKKAT_ISA=avx2 DIKKAT_BENCH_MODEL=build/bench/gpt2-small DIKKAT_BENCH_THREADS=2 ./build/bench/engine_bench --benchmark_filter='^BM_Prefill/dtype:0/tokens:512' --benchmark_min_time=1 2>/dev/null | grep BM_ | grep -o 'items_per_second=[0-9.]*' | cut -d= -f2)
  l=$(LD_LIBRARY_PATH=$bin $bin/llama-bench -m build/bench/llama/gpt2-f32.gguf -t 2 -p 512 -n 0 -r 2 -o json 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)[0]["avg_ts"],1))')
  p=$(ATEN_CPU_CAPABILITY=avx2 /usr/bin/python3 bench/pytorch_baseline.py build/bench/gpt2-small --threads 2 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["prefill_512_tokens_per_s"],1))')
  echo "round $r: dikkat $d llama.cpp $l pytorch $p"
done
