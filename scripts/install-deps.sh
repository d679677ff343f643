#!/usr/bin/env bash
# Installs every Debian package dikkat needs to build, test and benchmark.
# Idempotent: packages already present are skipped, so a second run costs ~1 s.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # serving stack
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libcpp-httplib-dev nlohmann-json3-dev libssl-dev
  # model stack: LibTorch plus a fast BLAS (the default reference BLAS is ~50x slower)
  libtorch-dev libopenblas0-openmp libsentencepiece-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # reference oracles for parity tests (Debian's own PyTorch and gRPC for Python)
  python3 python3-torch python3-numpy python3-grpcio python3-protobuf
  # tokenizer references: SentencePiece trainer/encoder; Unicode categories for GPT-2 pre-tokenization
  python3-sentencepiece libicu-dev
  # word list the shipped language model's test measures its output against
  wamerican
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
