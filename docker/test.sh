#!/usr/bin/env bash
# Container test (`make docker-test`): builds docker/Dockerfile with podman
# (no Docker engine needed), runs the image, waits until the host's `dikkat
# health` says SERVING, generates with the host CLI, scrapes /metrics, checks
# the image's HEALTHCHECK and user, stops the container with SIGTERM and
# requires a clean exit (code 0, "stopped" in the log).
#
#   docker/test.sh [BUILD_DIR]     BUILD_DIR holds the host's dikkat CLI
#                                  (client/dikkat); default: build
# Environment: DIKKAT_IMAGE (default localhost/dikkat:test), DIKKAT_DOCKERFILE
#   (default docker/Dockerfile; docker/Dockerfile.cuda on a GPU host, with
#   DIKKAT_RUN_ARGS="--device nvidia.com/gpu=all" and DIKKAT_SERVER_ARGS=--device=cuda:0),
#   DIKKAT_BASE_IMAGE (default localhost/debian:bookworm, made with
#   debootstrap when missing), KEEP_IMAGE=1 keeps the image afterwards.
#
# podman on this machine kind (see PLATFORM.md "Containers without a Docker
# engine"): runc (crun fails on the hybrid cgroups), cgroupfs, a file events
# logger, and host networking for both build and run.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD_DIR="$(cd "${1:-$ROOT/build}" && pwd)"
IMAGE="${DIKKAT_IMAGE:-localhost/dikkat:test}"
DOCKERFILE="${DIKKAT_DOCKERFILE:-docker/Dockerfile}"
BASE_IMAGE="${DIKKAT_BASE_IMAGE:-localhost/debian:bookworm}"
CLI="$BUILD_DIR/client/dikkat"
WORK="$BUILD_DIR/docker-test"
NAME="dikkat-test-$$"
T0=$SECONDS

log() { printf 'docker-test [%4ds] %s\n' "$((SECONDS - T0))" "$*"; }
fail() { log "FAIL: $*"; exit 1; }

[ -x "$CLI" ] || fail "no dikkat CLI at $CLI (cmake --build $BUILD_DIR --target dikkat)"
bash "$ROOT/scripts/install-deps.sh" --containers

mkdir -p "$WORK"
nofile="$(ulimit -Hn)"
[ "$nofile" = unlimited ] && nofile=65536
[ "$nofile" -gt 65536 ] && nofile=65536
cat > "$WORK/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"

cleanup() {
  podman rm -f -t 0 "$NAME" >/dev/null 2>&1 || true
  if [ "${KEEP_IMAGE:-0}" != 1 ]; then podman rmi -f "$IMAGE" >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

# ---- base image without a registry -------------------------------------------
if ! podman image exists "$BASE_IMAGE"; then
  mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  mirror="${mirror:-http://deb.debian.org/debian}"
  log "debootstrap bookworm from $mirror -> $BASE_IMAGE"
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" > "$WORK/debootstrap.log" 2>&1 \
    || { tail -20 "$WORK/debootstrap.log"; fail "debootstrap"; }
  tar -C "$WORK/rootfs" -c . | podman import - "$BASE_IMAGE" >/dev/null
  rm -rf "$WORK/rootfs"
  log "base image ready"
fi

# ---- build --------------------------------------------------------------------
log "building $IMAGE (log: $WORK/build.log)"
build_start=$SECONDS
podman build --format docker --network host --build-arg BASE_IMAGE="$BASE_IMAGE" \
  --build-arg BUILDER_IMAGE="$BASE_IMAGE" \
  -f "$ROOT/$DOCKERFILE" -t "$IMAGE" "$ROOT" > "$WORK/build.log" 2>&1 \
  || { tail -40 "$WORK/build.log"; fail "podman build"; }
log "built in $((SECONDS - build_start)) s; size $(podman image inspect --format '{{.Size}}' "$IMAGE" \
  | awk '{printf "%.0f MiB", $1 / 1048576}')"

[ "$(podman image inspect --format '{{.Config.User}}' "$IMAGE")" = "10001:10001" ] \
  || fail "image user is not 10001:10001"
podman image inspect --format '{{json .Config.ExposedPorts}}' "$IMAGE" | grep -q '50051/tcp' \
  || fail "50051 not exposed"
podman image inspect --format '{{json .Config.ExposedPorts}}' "$IMAGE" | grep -q '9090/tcp' \
  || fail "9090 not exposed"
# The runtime stage carries only the libraries ldd listed in the builder:
# every one must resolve, and BLAS must be OpenBLAS's OpenMP build.
missing="$(podman run --rm --health-interval=disable --entrypoint sh "$IMAGE" -c 'for f in /opt/dikkat/bin/dikkat-server \
  /opt/dikkat/bin/dikkat /opt/dikkat/lib/libdikkat_sentencepiece_shim.so; do ldd "$f"; done' \
  | grep 'not found' || true)"
[ -z "$missing" ] || fail "libraries missing in the image: $missing"
blas="$(podman run --rm --health-interval=disable --entrypoint readlink "$IMAGE" -f /usr/lib/x86_64-linux-gnu/libblas.so.3)"
case "$blas" in *openblas-openmp*) ;; *) fail "libblas.so.3 is $blas, not OpenBLAS (OpenMP)" ;; esac
log "every library resolves; libblas.so.3 = $blas"

# ---- run ------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GRPC_PORT="$(free_port)"
METRICS_PORT="$(free_port)"
while [ "$METRICS_PORT" = "$GRPC_PORT" ]; do METRICS_PORT="$(free_port)"; done
# Host networking: the server binds the loopback ports directly. Read-only
# root filesystem, as deploy/kubernetes runs it. No health timer (it needs
# systemd); `podman healthcheck run` below runs the image's HEALTHCHECK.
# shellcheck disable=SC2086  # word splitting of the optional extra arguments
podman run -d --name "$NAME" --network host --read-only --health-interval=disable ${DIKKAT_RUN_ARGS:-} \
  -e DIKKAT_LISTEN="127.0.0.1:$GRPC_PORT" -e DIKKAT_METRICS_LISTEN="127.0.0.1:$METRICS_PORT" \
  "$IMAGE" --threads=2 ${DIKKAT_SERVER_ARGS:-} > /dev/null 2> "$WORK/run.err" || { cat "$WORK/run.err"; fail "podman run"; }
log "started $NAME (gRPC 127.0.0.1:$GRPC_PORT, metrics 127.0.0.1:$METRICS_PORT)"

run_start=$SECONDS
until "$CLI" --target="127.0.0.1:$GRPC_PORT" --timeout=2 health >/dev/null 2>&1; do
  if [ "$(podman inspect --format '{{.State.Running}}' "$NAME")" != true ]; then
    podman logs "$NAME" | tail -20
    fail "container exited before SERVING"
  fi
  [ $((SECONDS - run_start)) -lt 120 ] || { podman logs "$NAME" | tail -20; fail "not SERVING after 120 s"; }
  sleep 1
done
log "SERVING after $((SECONDS - run_start)) s"
podman healthcheck run "$NAME" >/dev/null || fail "the image's HEALTHCHECK does not pass while SERVING"
[ "$(podman exec "$NAME" id -u)" = 10001 ] || fail "server does not run as uid 10001"
log "HEALTHCHECK passes; server runs as uid 10001"

# ---- generate with the host CLI ---------------------------------------------------
MAX_TOKENS=12
"$CLI" --target="127.0.0.1:$GRPC_PORT" --timeout=30 generate --max-tokens "$MAX_TOKENS" \
  --ignore-eos --temperature 0 --logprobs 0 --show-stats "the container says" \
  > "$WORK/generate.out" 2> "$WORK/generate.err" || { cat "$WORK/generate.err"; fail "generate"; }
received="$(grep -cE '^ +[0-9]+ +-?[0-9.]+' "$WORK/generate.err" || true)"
[ "$received" = "$MAX_TOKENS" ] || { cat "$WORK/generate.err"; fail "received $received tokens, asked $MAX_TOKENS"; }
log "generated $received tokens: $(head -c 80 "$WORK/generate.out" | tr '\n' ' ')"

# The SentencePiece model (dlopen()ed module in /opt/dikkat/lib) when the image has it.
if podman exec "$NAME" test -d /opt/dikkat/models/dikkat-numbers; then
  "$CLI" --target="127.0.0.1:$GRPC_PORT" --timeout=30 --model=dikkat-numbers tokenize "12 34" \
    > "$WORK/tokenize.out" 2>&1 || { cat "$WORK/tokenize.out"; fail "tokenize with dikkat-numbers"; }
  log "dikkat-numbers tokenizes (SentencePiece module loaded)"
fi

# ---- metrics ------------------------------------------------------------------------
curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" > "$WORK/metrics.txt" || fail "scrape /metrics"
generated="$(awk '/^dikkat_generated_tokens_total\{/ {s += $2} END {print s + 0}' "$WORK/metrics.txt")"
[ "$generated" = "$MAX_TOKENS" ] || fail "dikkat_generated_tokens_total is $generated, want $MAX_TOKENS"
grep -q '^dikkat_requests_total{code="OK",model="[^"]*",rpc="Generate"} 1$' "$WORK/metrics.txt" \
  || fail "no dikkat_requests_total{code=OK,rpc=Generate} 1"
grep -q '^dikkat_model_info{' "$WORK/metrics.txt" || fail "no dikkat_model_info"
grep -q '^process_resident_memory_bytes ' "$WORK/metrics.txt" || fail "no process_resident_memory_bytes"
log "/metrics: dikkat_generated_tokens_total = $generated"

# ---- SIGTERM -> drain -> exit 0 ---------------------------------------------------
# Generations in flight when SIGTERM arrives must still finish whole (the
# server drains for up to --grace_period before it exits). Many at once, so
# that they are still running when the signal lands: with the AVX-512 kernels
# 12 streams of dikkat-lm (256 positions) all ended within the ~1 s that
# `podman kill` itself takes on a busy machine.
STREAMS=32
client_pids=()
for i in $(seq 1 "$STREAMS"); do
  "$CLI" --target="127.0.0.1:$GRPC_PORT" --timeout=60 generate --max-tokens 400 --ignore-eos \
    --temperature 0 --logprobs 5 --show-stats "story number $i" \
    > "$WORK/drain$i.out" 2> "$WORK/drain$i.err" &
  client_pids+=($!)
done
# Text streams to stdout as it is generated: send SIGTERM as soon as it
# flows on one stream, so that the others are in flight too. (Waiting until it
# flowed on every stream raced the other way: on a fast machine the tiny model
# finished the early streams before the last client process had started, and
# none was left in flight.) A client whose process had not connected yet when
# the signal landed is refused with UNAVAILABLE, which is what a draining
# server must do with new calls: that is accepted, as long as it received
# nothing; every generation that started must finish whole.
wait_start=$SECONDS
until compgen -G "$WORK/drain*.out" > /dev/null && [ -n "$(find "$WORK" -name 'drain*.out' -size +0c -print -quit)" ]; do
  [ $((SECONDS - wait_start)) -lt 60 ] || { cat "$WORK/drain1.err"; fail "no generation produced text in 60 s"; }
  sleep 0.02
done
stop_start=$SECONDS
# Taken before `podman kill`: a stream that ends while podman delivers the
# signal counts as in flight, which keeps the check about the server, not
# about podman's own latency.
sigterm_ns="$(date +%s%N)"
podman kill --signal TERM "$NAME" > /dev/null
in_flight=0
refused=0
for i in $(seq 1 "$STREAMS"); do
  if ! wait "${client_pids[$((i - 1))]}"; then
    if [ ! -s "$WORK/drain$i.out" ] && grep -qi "unavailable" "$WORK/drain$i.err"; then
      refused=$((refused + 1))
      continue
    fi
    cat "$WORK/drain$i.err"
    fail "generation $i failed on SIGTERM"
  fi
  # The CLI prints the stats when the stream ends: the file's mtime is the end.
  [ "$(stat -c %.9Y "$WORK/drain$i.err" | tr -d .)" -gt "$sigterm_ns" ] && in_flight=$((in_flight + 1))
  received="$(grep -cE '^ +[0-9]+ +-?[0-9.]+' "$WORK/drain$i.err" || true)"
  grep -qE "finish: (LENGTH|EOS).* generated tokens: $received " "$WORK/drain$i.err" \
    || { cat "$WORK/drain$i.err"; fail "generation $i did not finish whole ($received tokens)"; }
done
[ "$in_flight" -gt 0 ] || fail "no generation was still running at SIGTERM: the drain went untested"
log "$in_flight of $STREAMS generations were in flight at SIGTERM and finished whole; $refused not yet connected were refused"
podman wait "$NAME" > /dev/null
code="$(podman inspect --format '{{.State.ExitCode}}' "$NAME")"
podman logs "$NAME" > "$WORK/server.log" 2>&1 || true
[ "$code" = 0 ] || { tail -20 "$WORK/server.log"; fail "exit code $code after SIGTERM"; }
grep -q 'dikkat-server: SIGTERM, draining' "$WORK/server.log" || fail "the server never saw SIGTERM"
grep -q 'dikkat-server: stopped' "$WORK/server.log" || fail "no clean stop in the log"
log "SIGTERM -> exit 0 in $((SECONDS - stop_start)) s"
log "PASS (total $((SECONDS - T0)) s)"
