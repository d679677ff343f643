#!/usr/bin/env bash
# CI's hardening stage (docs/hardening.md): sanitizer builds and a short fuzz run.
#
#   scripts/hardening.sh [asan|tsan|all] [FUZZ_SCALE=1]
#
# asan: one clang build with AddressSanitizer + UndefinedBehaviorSanitizer and
#       libFuzzer coverage (-DDIKKAT_FUZZ=ON) in build-asan/. It builds the
#       fuzzers and every test, runs each fuzzer from its committed seed corpus
#       for a fixed number of inputs (fuzz/run.sh's table times FUZZ_SCALE;
#       14 targets, 70-115 s in all), then the unit, integration, soak and parity
#       suites (servers the tests start are ASan builds too). LeakSanitizer
#       checks every process at exit.
# tsan: a clang ThreadSanitizer build in build-tsan/ of the suites whose
#       synchronisation TSan can see: the engine (its stress test hammers it
#       from several threads), the model library, metrics, conversion and the
#       client's tensor code. The suites that drive gRPC's transport are left
#       out: Debian's gRPC is not built with TSan, its completion-queue hand-offs
#       are invisible to it, and each such suite shows 80-200 reports that are
#       all inside gRPC's own templates (measured; docs/hardening.md).
# Any sanitizer report fails the stage (halt_on_error / exit codes).
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT="${1:-all}"
FUZZ_SCALE="${2:-1}"
JOBS="${JOBS:-$(nproc)}"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/dikkat-ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=true
CLANG=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)

stamp() { echo "hardening: $* (at $(( SECONDS / 60 )) min $(( SECONDS % 60 )) s)"; }

asan() {
  stamp "asan: configure + build (clang, ASan+UBSan, fuzzer coverage)"
  cmake -S . -B build-asan -G Ninja "${CLANG[@]}" -DDIKKAT_FUZZ=ON -DDIKKAT_BUILD_BENCH=OFF
  cmake --build build-asan -j "$JOBS"
  cmake --build build-asan -j "$JOBS" --target all_fuzzers
  stamp "asan: fuzzing (fixed runs per target, scale ${FUZZ_SCALE})"
  bash fuzz/run.sh build-asan "$FUZZ_SCALE"
  stamp "asan: tests"
  # Left out: deploy (checks of the deployment files; no dikkat code runs) and
  # sentencepiece (suites that need SentencePiece, which sanitizer builds
  # cannot load: model/text/sentencepiece_tokenizer.cc), and isa-models (the ISA
  # matrix's model-level suites; its kernel suites run: tests/CMakeLists.txt).
  (cd build-asan && ctest --output-on-failure -j "$JOBS" -LE 'deploy|sentencepiece|isa-models')
  stamp "asan: done"
}

tsan() {
  stamp "tsan: configure + build (clang, ThreadSanitizer)"
  cmake -S . -B build-tsan -G Ninja "${CLANG[@]}" -DDIKKAT_SANITIZE=thread -DDIKKAT_BUILD_BENCH=OFF
  local tests
  tests=$(cd build-tsan && ctest -N -L tsan | sed -n 's/^ *Test *#[0-9]*: //p')
  [ -n "$tests" ] || { echo "no tests labelled tsan" >&2; exit 1; }
  # shellcheck disable=SC2086
  cmake --build build-tsan -j "$JOBS" --target $tests
  stamp "tsan: tests"
  (cd build-tsan && ctest --output-on-failure -j "$JOBS" -L tsan)
  stamp "tsan: done"
}

case "$WHAT" in
  asan) asan ;;
  tsan) tsan ;;
  all) asan; tsan ;;
  *) echo "usage: $0 [asan|tsan|all] [FUZZ_SCALE]" >&2; exit 2 ;;
esac
