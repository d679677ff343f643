#!/usr/bin/env bash
# Installs what retraining the shipped models (training/*.py) needs; CI does
# not retrain, so scripts/install-deps.sh leaves these out.
#   python3-torch, python3-sentencepiece  the trainers (Debian's /usr/bin/python3)
#   python3-matplotlib                    the loss-curve PNGs in docs/
#   bible-kjv, bible-kjv-text             the King James Version (public domain) and its reader
#   fortunes, fortunes-min                the fortune-mod cookie databases
# Idempotent: packages already present are skipped.
set -euo pipefail

PACKAGES=(python3 python3-torch python3-numpy python3-sentencepiece python3-matplotlib
          bible-kjv bible-kjv-text fortunes fortunes-min)

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
echo "install-training-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
