#!/usr/bin/env bash
# The shipped models through the running server, as a user calls them:
# dikkat-server with models/dikkat-lm and models/dikkat-numbers (what
# `make run` serves), the dikkat CLI as the client.
#  - dikkat-numbers: the 50 held-out numbers of tests/model/data (never seen in
#    training) must come back as their exact English words (>= 48 of 50);
#  - dikkat-lm: a greedy continuation must be mostly dictionary words (wamerican).
# usage: demo_serving_test.sh SERVER CLI SOURCE_DIR
set -euo pipefail
SERVER=$1 CLI=$2 SRC=$3
WORK=$(mktemp -d)
LOG=$WORK/server.log
cleanup() {
  [ -n "${PID:-}" ] && kill -TERM "$PID" 2>/dev/null && wait "$PID" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$SERVER" --listen=127.0.0.1:0 --metrics_listen= --model="$SRC/models/dikkat-lm" \
  --model="$SRC/models/dikkat-numbers" > "$LOG" 2>&1 &
PID=$!
for _ in $(seq 1 300); do
  grep -q "serving 2 model" "$LOG" && break
  kill -0 "$PID" 2>/dev/null || { cat "$LOG"; echo "server exited"; exit 1; }
  sleep 0.1
done
ADDR=$(sed -n 's/^listening on //p' "$LOG")
[ -n "$ADDR" ] || { cat "$LOG"; echo "no listening line"; exit 1; }

/usr/bin/python3 - "$CLI" "$ADDR" "$SRC" <<'PY'
import json, re, subprocess, sys
cli, addr, src = sys.argv[1:]
ref = json.load(open(f"{src}/tests/model/data/dikkat_numbers_reference.json"))
right = 0
for case in ref["heldout"]:
    out = subprocess.run([cli, f"--target={addr}", "generate", "--model=dikkat-numbers",
                          "--temperature=0", case["digits"]],
                         capture_output=True, text=True, timeout=60)
    got = out.stdout.strip()
    if out.returncode != 0:
        print(f"dikkat generate failed for {case['digits']}: {out.stderr}")
    elif got == case["words"]:
        right += 1
    else:
        print(f"  {case['digits']}: got {got!r}, want {case['words']!r}")
total = len(ref["heldout"])
print(f"dikkat-numbers: {right}/{total} held-out numbers exactly right through the server")
assert total >= 50 and right >= 48, "exact-match sample below 96%"

out = subprocess.run([cli, f"--target={addr}", "generate", "--temperature=0",
                      "--max-tokens=48", "The king said unto them"],
                     capture_output=True, text=True, timeout=60, check=True).stdout
words = [w.lower() for w in re.findall(r"[A-Za-z']+", out)]
dictionary = {w.strip().lower() for w in open("/usr/share/dict/american-english")}
known = sum(1 for w in words if w in dictionary or w.rstrip("'s") in dictionary)
print(f"dikkat-lm: {out.strip()!r}: {known}/{len(words)} dictionary words")
assert len(words) >= 10 and known >= 0.7 * len(words), "the language model does not write words"
PY
