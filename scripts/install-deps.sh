#!/usr/bin/env bash
# Installs every Debian package dikkat needs to build, test and benchmark.
# Idempotent: packages already present are skipped, so a second run costs ~1 s.
#   scripts/install-deps.sh               build, test and benchmark
#   scripts/install-deps.sh --containers  also podman, runc and debootstrap for
#                                         `make docker-test` (docker/test.sh)
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git
  # serving stack
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libcpp-httplib-dev nlohmann-json3-dev libssl-dev
  # model stack: LibTorch plus a fast BLAS (the default reference BLAS is ~50x slower)
  libtorch-dev libopenblas0-openmp libsentencepiece-dev
  # sanitizer builds and libFuzzer (scripts/hardening.sh): clang with its runtimes
  clang libclang-rt-14-dev
  # tests and benchmarks; the Prometheus server scrapes a real dikkat-server in
  # tests/integration/prometheus_test.sh (promtool checks docker/prometheus.yml)
  libgtest-dev libgmock-dev libbenchmark-dev prometheus
  # deployment file checks (tests/deploy): docker-compose validates docker/compose.yaml
  # without an engine; PyYAML reads the manifests
  docker-compose python3-yaml
  # reference oracles for parity tests (Debian's own PyTorch and gRPC for Python)
  python3 python3-torch python3-numpy python3-grpcio python3-protobuf
  # tokenizer references: SentencePiece trainer/encoder; Unicode categories for GPT-2 pre-tokenization;
  # the `regex` module (\p{L}, (?i:...)) runs Llama 3's and Qwen2's split patterns
  python3-sentencepiece libicu-dev python3-regex
  # chat-template reference: Debian's jinja2, configured as Hugging Face's
  # apply_chat_template configures it (tests/chat/chat_template_reference.py)
  python3-jinja2
  # word list the shipped language model's test measures its output against
  wamerican
  # the OpenAI-compatible port called with curl (tests/integration/openai_client_test.sh)
  curl
)

# npm packages drive some tests (tests/deploy/npm_prefix.sh: dockerfilelint,
# kubernetes-models, the official `openai` client): Debian's nodejs and npm
# when no Node.js is installed. A Node.js already there (e.g. NodeSource's
# nodejs, which bundles npm and conflicts with Debian's npm) is kept.
if ! command -v node >/dev/null; then
  PACKAGES+=(nodejs npm)
fi

if [ "${1:-}" = "--containers" ]; then
  # Images without a Docker engine (see docker/test.sh): crun fails on this
  # machine kind's hybrid cgroups, so runc; debootstrap makes the base image.
  PACKAGES+=(podman runc conmon debootstrap)
fi

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
# Package scripts must not start services (prometheus's would take port 9090,
# dikkat-server's default metrics port, and fail without an init system):
# policy-rc.d exit 101 tells invoke-rc.d "not now". Only ours is removed.
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\n# installed by dikkat scripts/install-deps.sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod 755 "$POLICY"
  trap '$SUDO rm -f "$POLICY"' EXIT
fi
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
