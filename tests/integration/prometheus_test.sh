#!/usr/bin/env bash
# A real Prometheus scrapes a real dikkat-server: the target is up, and the
# counters Prometheus stored equal what the clients saw (tokens received over
# the gRPC stream, requests sent). The PromQL of the shipped Grafana dashboard
# and of the prometheus-adapter rules (HPA) is then run against this
# Prometheus: every query must be accepted, and the HPA's must return data.
#
#   prometheus_test.sh SERVER CLI MODEL_DIR SOURCE_DIR
# Needs Debian's `prometheus` (scripts/install-deps.sh). Everything runs on
# 127.0.0.1 with ports chosen at run time, in a temporary directory.
set -euo pipefail

SERVER="$1"
CLI="$2"
MODEL="$3"
SRC="$4"
PY=/usr/bin/python3
REQUESTS=5
WAIT_SECONDS=30

TMP="$(mktemp -d)"
SERVER_PID=""
PROM_PID=""
cleanup() {
  for pid in $SERVER_PID $PROM_PID; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in $SERVER_PID $PROM_PID; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in server.err prometheus.log; do
    [ -f "$TMP/$f" ] && { echo "--- $f (tail)" >&2; tail -15 "$TMP/$f" >&2; }
  done
  exit 1
}

command -v prometheus >/dev/null || fail "Debian's prometheus is not installed (scripts/install-deps.sh)"

# ---- dikkat-server on loopback, ports picked by the kernel -------------------
"$SERVER" --model="$MODEL" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 --threads=1 \
  > "$TMP/server.out" 2> "$TMP/server.err" &
SERVER_PID=$!
for _ in $(seq 1 300); do
  grep -q '^listening on ' "$TMP/server.out" && grep -q 'metrics on http://' "$TMP/server.err" && break
  kill -0 "$SERVER_PID" 2>/dev/null || fail "dikkat-server exited at start"
  sleep 0.1
done
GRPC="$(sed -n 's/^listening on //p' "$TMP/server.out")"
METRICS="$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$TMP/server.err")"
[ -n "$GRPC" ] && [ -n "$METRICS" ] || fail "no addresses from dikkat-server"
for _ in $(seq 1 300); do
  "$CLI" --target="$GRPC" --timeout=2 health >/dev/null 2>&1 && break
  sleep 0.1
done
"$CLI" --target="$GRPC" --timeout=2 health >/dev/null || fail "dikkat-server is not SERVING"

# ---- Prometheus with its own config and storage ------------------------------
PROM_PORT="$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat > "$TMP/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: dikkat
    static_configs:
      - targets: ["$METRICS"]
EOF
prometheus --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn > "$TMP/prometheus.log" 2>&1 &
PROM_PID=$!
PROM="http://127.0.0.1:$PROM_PORT"

# ---- known requests; count what the clients receive --------------------------
# Different lengths so that a counter that counts requests instead of tokens,
# or drops one request, cannot match by accident.
expected_tokens=0
for i in $(seq 1 "$REQUESTS"); do
  n=$((2 * i + 1))
  "$CLI" --target="$GRPC" --timeout=30 generate --max-tokens "$n" --ignore-eos --seed "$i" \
    --logprobs 0 --show-stats "request $i" > "$TMP/gen$i.out" 2> "$TMP/gen$i.err" \
    || { cat "$TMP/gen$i.err" >&2; fail "generate $i"; }
  # --logprobs prints one line per token the stream delivered.
  got="$(grep -cE '^ +[0-9]+ +-?[0-9.]+' "$TMP/gen$i.err" || true)"
  [ "$got" = "$n" ] || { cat "$TMP/gen$i.err" >&2; fail "request $i: received $got tokens, asked $n"; }
  expected_tokens=$((expected_tokens + got))
done
echo "sent $REQUESTS Generate requests; the clients received $expected_tokens tokens"

# ---- ask Prometheus until it has scraped the final values --------------------
# query EXPR -> prints the first sample's value ("" when the result is empty);
# exits 2 when Prometheus rejects the query.
query() {
  "$PY" - "$PROM" "$1" <<'EOF'
import json, sys, urllib.error, urllib.parse, urllib.request
url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
try:
    body = json.load(urllib.request.urlopen(url, timeout=5))
except urllib.error.HTTPError as e:
    print(json.load(e).get("error", e), file=sys.stderr)
    sys.exit(2)
except (urllib.error.URLError, ConnectionError, OSError):
    sys.exit(1)  # not up yet
if body.get("status") != "success":
    print(body, file=sys.stderr)
    sys.exit(2)
result = body["data"]["result"]
print(result[0]["value"][1] if result else "")
EOF
}

up="" tokens="" requests=""
deadline=$((SECONDS + WAIT_SECONDS))
while [ $SECONDS -lt $deadline ]; do
  up="$(query 'up{job="dikkat"}' || true)"
  tokens="$(query 'sum(dikkat_generated_tokens_total{job="dikkat"})' || true)"
  requests="$(query 'sum(dikkat_requests_total{job="dikkat",rpc="Generate",code="OK"})' || true)"
  if [ "$up" = 1 ] && [ "$tokens" = "$expected_tokens" ] && [ "$requests" = "$REQUESTS" ]; then
    break
  fi
  kill -0 "$PROM_PID" 2>/dev/null || fail "prometheus exited"
  sleep 1
done
echo "prometheus: up=$up generated_tokens=$tokens generate_requests_ok=$requests"
[ "$up" = 1 ] || fail "up{job=\"dikkat\"} is '$up' after ${WAIT_SECONDS}s"
[ "$tokens" = "$expected_tokens" ] \
  || fail "dikkat_generated_tokens_total is '$tokens', the clients received $expected_tokens"
[ "$requests" = "$REQUESTS" ] || fail "dikkat_requests_total{rpc=Generate,code=OK} is '$requests', sent $REQUESTS"

# Per-request histograms saw every request; the info gauge names the model.
count="$(query 'sum(dikkat_request_generated_tokens_count{job="dikkat"})')"
[ "$count" = "$REQUESTS" ] || fail "dikkat_request_generated_tokens_count is '$count'"
info="$(query 'count(dikkat_model_info{job="dikkat",architecture="decoder-only"} == 1)')"
[ "$info" = 1 ] || fail "dikkat_model_info{architecture=decoder-only} missing"

# ---- the shipped PromQL runs against these series ----------------------------
"$PY" - "$SRC" > "$TMP/queries.txt" <<'EOF'
import json, sys, yaml
src = sys.argv[1]
dash = json.load(open(src + "/docker/grafana/dashboards/dikkat.json"))
for panel in dash["panels"]:
    for target in panel.get("targets", []):
        expr = (target["expr"].replace("$__rate_interval", "1m")
                .replace('"$model"', '".*"').replace('"$job"', '".*"'))
        print("dashboard\t" + expr)
for doc in yaml.safe_load_all(open(src + "/deploy/kubernetes/prometheus-adapter.yaml")):
    for rule in yaml.safe_load(doc["data"]["config.yaml"])["rules"]:
        series = rule["seriesQuery"].split("{")[0].strip("'\" ")
        # What the adapter sends for one pod, with this test's labels instead
        # of the pod's namespace/pod labels.
        expr = (rule["metricsQuery"].replace("<<.Series>>", series)
                .replace("<<.LabelMatchers>>", 'job="dikkat"').replace("<<.GroupBy>>", "job"))
        print("adapter\t" + expr)
EOF
checked=0
while IFS=$'\t' read -r kind expr; do
  value="$(query "$expr")" || fail "Prometheus rejects the $kind query: $expr"
  if [ "$kind" = adapter ] && [ -z "$value" ]; then
    fail "the HPA's adapter query returns no data: $expr"
  fi
  checked=$((checked + 1))
done < "$TMP/queries.txt"
echo "ran $checked dashboard and adapter queries"

# ---- SIGTERM: the server drains and exits 0 -----------------------------------
kill -TERM "$SERVER_PID"
code=0
wait "$SERVER_PID" || code=$?
SERVER_PID=""
[ "$code" = 0 ] || fail "dikkat-server exited $code after SIGTERM"
echo "PASS"
