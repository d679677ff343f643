#!/bin/sh
# dikkat image entry point, run by tini as PID 1's only child. Adds the
# container defaults (listen on all interfaces, metrics on 0.0.0.0:9090, the
# image's models) and then exec()s dikkat-server so that the server itself
# receives SIGTERM from tini and drains (see --grace_period).
#
#   DIKKAT_MODELS  comma-separated model folders or names under
#                  /opt/dikkat/models; used when no --model flag is given.
#                  Default: dikkat-lm and dikkat-numbers when the image has
#                  them, else tiny-lm.
#   DIKKAT_LISTEN, DIKKAT_METRICS_LISTEN  override the addresses below.
#   DIKKAT_OPENAI_LISTEN  when set (e.g. 0.0.0.0:8000, the port the image
#                  exposes for it), also serve the OpenAI-compatible HTTP API
#                  there; unset (the default): off.
# Flags given to the container come last and so win (absl keeps the last
# occurrence of a flag; --model is the exception: every occurrence counts).
set -eu

MODEL_ROOT=/opt/dikkat/models

default_models() {
  found=""
  for name in dikkat-lm dikkat-numbers; do
    if [ -d "$MODEL_ROOT/$name" ]; then found="${found:+$found,}$MODEL_ROOT/$name"; fi
  done
  echo "${found:-$MODEL_ROOT/tiny-lm}"
}

has_model_flag=false
for arg in "$@"; do
  case "$arg" in
    --model|--model=*|-model|-model=*) has_model_flag=true ;;
  esac
done

set -- --listen="${DIKKAT_LISTEN:-0.0.0.0:50051}" \
       --metrics_listen="${DIKKAT_METRICS_LISTEN:-0.0.0.0:9090}" \
       --openai_listen="${DIKKAT_OPENAI_LISTEN:-}" "$@"

if [ "$has_model_flag" = false ]; then
  models=""
  old_ifs=$IFS
  IFS=,
  for m in ${DIKKAT_MODELS:-$(default_models)}; do
    # A bare name means a folder of the image.
    case "$m" in
      /*|./*|../*|*=*) path="$m" ;;
      *) path="$MODEL_ROOT/$m" ;;
    esac
    models="${models:+$models,}$path"
  done
  IFS=$old_ifs
  set -- --model="$models" "$@"
fi

exec /opt/dikkat/bin/dikkat-server "$@"
