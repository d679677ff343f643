#!/usr/bin/env bash
# Runs every fuzzer of a DIKKAT_FUZZ=ON build for a while, starting from the
# committed seed corpus (copied, so fuzz/corpus/ only changes on purpose).
#
#   fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET=10] [TARGET...]
#
# Exit status 1 if any fuzzer found a crash, a leak, a timeout or a broken
# property; the reproducer is kept in $ARTIFACTS (default /tmp/dikkat-fuzz-artifacts)
# and its path is printed. Reproduce with: BUILD_DIR/fuzz/<target>_fuzzer <file>
set -uo pipefail

BUILD="${1:?usage: fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET] [TARGET...]}"
SECONDS_PER_TARGET="${2:-10}"
shift $(( $# >= 2 ? 2 : 1 ))
HERE="$(cd "$(dirname "$0")" && pwd)"
ARTIFACTS="${ARTIFACTS:-/tmp/dikkat-fuzz-artifacts}"
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(safetensors torch_checkpoint config byte_tokenizer gpt2_bpe_tokenizer
           llama_bpe_tokenizer wordpiece_tokenizer request)
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
for t in "${TARGETS[@]}"; do
  bin="$BUILD/fuzz/${t}_fuzzer"
  [ -x "$bin" ] || { echo "missing $bin (build target all_fuzzers)" >&2; failed+=("$t"); continue; }
  mkdir -p "$WORK/$t"
  cp "$HERE/corpus/$t/"* "$WORK/$t/" 2>/dev/null || true
  log="$WORK/$t.log"
  start=$(date +%s)
  # LibTorch has no frame pointers: the slow unwinder is needed for the
  # suppression to see past its frames.
  extra=""
  [ "$t" = torch_checkpoint ] && extra=":fast_unwind_on_malloc=0"
  ASAN_OPTIONS="$ASAN_OPTIONS$extra" "$bin" "$WORK/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=4096 \
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
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]} (artifacts in $ARTIFACTS)"
  exit 1
fi
echo "all fuzzers ran clean"
