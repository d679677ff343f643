#!/usr/bin/env bash
# Runs every fuzzer of a DIKKAT_FUZZ=ON build for a fixed number of inputs,
# starting from the committed seed corpus (copied, so fuzz/corpus/ only
# changes on purpose).
#
#   fuzz/run.sh BUILD_DIR [SCALE=1] [TARGET...]
#
# Each target runs RUNS[target] x SCALE inputs (-runs=N, the table below).
# The counts are CI's: chosen so that all targets together take about a
# minute or a little more on CI's 2-core machine (docs/hardening.md has
# the measurement); a fixed count makes the work done, and every target's
# share of it, the same however busy the machine is (the wall time still
# grows with the load). Longer runs:
# `fuzz/run.sh build-fuzz 20 request` (20x), or FUZZ_SECONDS=300 to run
# each target for a time instead of a count.
#
# Exit status 1 if any fuzzer found a crash, a leak, a timeout or a broken
# property; the reproducer is kept in $ARTIFACTS (default /tmp/dikkat-fuzz-artifacts)
# and its path is printed. Reproduce with: BUILD_DIR/fuzz/<target>_fuzzer <file>
set -uo pipefail

BUILD="${1:?usage: fuzz/run.sh BUILD_DIR [SCALE] [TARGET...]}"
SCALE="${2:-1}"
shift $(( $# >= 2 ? 2 : 1 ))
HERE="$(cd "$(dirname "$0")" && pwd)"
ARTIFACTS="${ARTIFACTS:-/tmp/dikkat-fuzz-artifacts}"
case "$SCALE" in
  ''|*[!0-9]*|0) echo "fuzz/run.sh: SCALE must be a positive integer, got '$SCALE'" >&2; exit 2 ;;
esac

# Inputs per target in CI (SCALE 1), each about 4-6 s on CI's 2-core machine
# while other builds share it (executions per second measured that way, the
# seed corpus included, in the comments; docs/hardening.md).
declare -A RUNS=(
  [safetensors]=1000             # ~350/s: maps a temp file per input
  [torch_checkpoint]=100         # ~30/s plus LibTorch's start-up: opens a zip per input
  [config]=15000                 # ~4 500/s
  [byte_tokenizer]=50000         # ~12 000/s
  [gpt2_bpe_tokenizer]=25000     # ~5 000/s
  [llama_bpe_tokenizer]=20000    # ~4 500/s
  [wordpiece_tokenizer]=30000    # ~6 000/s
  [request]=100000               # ~35 000/s
  [torch_pickle]=8000            # ~2 500/s: the unpickler alone
  [safetensors_index]=12000      # ~4 500/s
  [tokenizer_files]=600          # ~130/s: two temp files and SHA-256s per load
  [metrics_http_request]=120000  # ~30 000/s
  [chat_template]=12000          # ~2 500/s
  [openai_request]=20000         # ~3 500/s from the seeds (5 700/s later in a run)
)
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(safetensors torch_checkpoint config byte_tokenizer gpt2_bpe_tokenizer
           llama_bpe_tokenizer wordpiece_tokenizer request torch_pickle safetensors_index
           tokenizer_files metrics_http_request chat_template openai_request)
fi

mkdir -p "$ARTIFACTS"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# libFuzzer checks for leaks after every input that allocated more than it
# freed; fuzz/lsan.supp lists the third-party leaks it must not report.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$HERE/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

failed=()
total_start=$(date +%s)
for t in "${TARGETS[@]}"; do
  bin="$BUILD/fuzz/${t}_fuzzer"
  [ -x "$bin" ] || { echo "missing $bin (build target all_fuzzers)" >&2; failed+=("$t"); continue; }
  [ -n "${RUNS[$t]:-}" ] || { echo "fuzz/run.sh: no run count for $t (RUNS)" >&2; failed+=("$t"); continue; }
  if [ -n "${FUZZ_SECONDS:-}" ]; then
    limit="-max_total_time=$FUZZ_SECONDS"
  else
    limit="-runs=$(( RUNS[$t] * SCALE ))"
  fi
  mkdir -p "$WORK/$t"
  cp "$HERE/corpus/$t/"* "$WORK/$t/" 2>/dev/null || true
  log="$WORK/$t.log"
  start=$(date +%s)
  # LibTorch has no frame pointers: the slow unwinder is needed for the
  # suppression to see past its frames.
  extra=""
  [ "$t" = torch_checkpoint ] && extra=":fast_unwind_on_malloc=0"
  ASAN_OPTIONS="$ASAN_OPTIONS$extra" "$bin" "$WORK/$t" "$limit" -timeout=10 -rss_limit_mb=4096 \
    -max_len=4096 -print_final_stats=1 -artifact_prefix="$ARTIFACTS/${t}-" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
  printf '%-20s rc=%d %4ss  runs=%s %s corpus=%s\n' "$t" "$rc" "$(( $(date +%s) - start ))" \
    "${runs:-?}" "${cov:-}" "$(ls "$WORK/$t" | wc -l)"
  if [ $rc -ne 0 ]; then
    failed+=("$t")
    grep -E 'ERROR|property failed|Test unit written|SUMMARY' "$log" | head -8
  fi
done
echo "fuzzing took $(( $(date +%s) - total_start )) s"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]} (artifacts in $ARTIFACTS)"
  exit 1
fi
echo "all fuzzers ran clean"
