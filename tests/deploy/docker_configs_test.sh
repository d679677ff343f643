#!/usr/bin/env bash
# Checks docker/ without building an image (docker/test.sh builds and runs it):
#  - promtool check config on the compose Prometheus config;
#  - docker-compose config on compose.yaml (the Compose schema; no engine needed);
#  - dockerfilelint (npm) on Dockerfile and Dockerfile.cuda;
#  - the wiring between them: scrape target = the dikkat service's metrics
#    port, Grafana datasource uid = the dashboard's, the dashboard's panels
#    (request rate, latency percentiles, tokens/s, queue, KV usage) query
#    metrics dikkat-server exports, and docs/metrics.md documents every one.
#   docker_configs_test.sh SOURCE_DIR BINARY_DIR
set -euo pipefail
SRC="$1"
BIN="$2"
here="$(dirname "$0")"
PY=/usr/bin/python3

echo "== promtool check config docker/prometheus.yml"
promtool check config "$SRC/docker/prometheus.yml"

if command -v docker-compose >/dev/null; then
  echo "== docker-compose config docker/compose.yaml"
  docker-compose -f "$SRC/docker/compose.yaml" config -q
else
  echo "FAIL: docker-compose is not installed (scripts/install-deps.sh)" >&2
  exit 1
fi

for f in entrypoint.sh healthcheck.sh test.sh; do
  sh -n "$SRC/docker/$f" 2>/dev/null || bash -n "$SRC/docker/$f"
done

echo "== dockerfilelint"
prefix="$(bash "$here/npm_prefix.sh" "$BIN" dockerfilelint@1.8.0)"
lint_json="$(mktemp)"
trap 'rm -f "$lint_json"' EXIT
# dockerfilelint exits non-zero when it finds issues; the filter decides.
"$prefix/node_modules/.bin/dockerfilelint" -o json "$SRC/docker/Dockerfile" \
  "$SRC/docker/Dockerfile.cuda" > "$lint_json" || true

"$PY" - "$SRC" "$lint_json" <<'EOF'
import json, os, re, sys
import yaml

src, lint_path = sys.argv[1], sys.argv[2]
failures = []
def check(ok, what):
    if not ok:
        failures.append(what)

# ---- dockerfilelint, minus two known false positives of version 1.8.0 ----------
lint = json.load(open(lint_path))
check(len(lint.get("files", [])) == 2, "dockerfilelint did not report on both Dockerfiles")
for f in lint.get("files", []):
    text = open(f["file"]).read()
    arg_defaults = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))
    for issue in f["issues"]:
        content = issue["content"]
        # FROM ${ARG}: the linter does not expand ARGs; the default must carry a tag.
        m = re.match(r"FROM \$\{(\w+)\}", content)
        if issue["title"] == "Base Image Missing Tag" and m and ":" in arg_defaults.get(m.group(1), ""):
            continue
        # Its HEALTHCHECK option regex (--\w+) cuts --start-period at the hyphen.
        if (issue["title"] == "Invalid Argument Format" and content.startswith("HEALTHCHECK")
                and set(re.findall(r"--([\w-]+)=", content)) <= {"interval", "timeout", "start-period", "retries"}):
            continue
        check(False, f"dockerfilelint {os.path.basename(f['file'])}:{issue['line']}: "
                     f"{issue['title']}: {content}")

# ---- exported metric families (server/metrics.cc) --------------------------------
exported = set(re.findall(r'\.Name\("([a-z_]+)"\)', open(f"{src}/server/metrics.cc").read()))
check("dikkat_requests_waiting" in exported, "cannot read metric names from server/metrics.cc")
docs = open(f"{src}/docs/metrics.md").read()
for name in sorted(exported):
    check(f"`{name}`" in docs, f"docs/metrics.md does not document {name}")

def family(series):
    for suffix in ("_bucket", "_sum", "_count"):
        if series.endswith(suffix) and series[: -len(suffix)] in exported:
            return series[: -len(suffix)]
    return series

# ---- compose <-> prometheus.yml <-> Dockerfile <-> Grafana -----------------------
compose = yaml.safe_load(open(f"{src}/docker/compose.yaml"))
services = compose["services"]
for s in ("dikkat", "prometheus", "grafana"):
    check(s in services, f"compose has no {s} service")
build = services["dikkat"]["build"]
context = os.path.normpath(os.path.join(src, "docker", build["context"]))
check(os.path.isfile(os.path.join(context, build["dockerfile"])), "compose build.dockerfile missing")
mounts = {}
for name, service in services.items():
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            check(os.path.exists(os.path.join(src, "docker", source)),
                  f"compose {name} mounts missing {source}")
            mounts[os.path.normpath(os.path.join("docker", source))] = target

dockerfile = open(f"{src}/docker/Dockerfile").read()
exposed = set(re.findall(r"^EXPOSE (.+)$", dockerfile, re.M)[0].split())
check({"50051", "9090"} <= exposed, "Dockerfile does not EXPOSE 50051 and 9090")
check(re.search(r"^USER (?!root|0)", dockerfile, re.M) is not None, "Dockerfile runs as root")
check(re.search(r'^ENTRYPOINT \["/usr/bin/tini", "--"', dockerfile, re.M) is not None,
      "Dockerfile ENTRYPOINT is not exec-form tini")
check("HEALTHCHECK" in dockerfile and "healthcheck.sh" in dockerfile, "Dockerfile has no HEALTHCHECK")
entrypoint = open(f"{src}/docker/entrypoint.sh").read()
check("DIKKAT_METRICS_LISTEN:-0.0.0.0:9090" in entrypoint, "entrypoint does not serve metrics on 0.0.0.0:9090")
check(re.search(r"^exec /opt/dikkat/bin/dikkat-server", entrypoint, re.M) is not None,
      "entrypoint does not exec the server (SIGTERM would not reach it)")

prom = yaml.safe_load(open(f"{src}/docker/prometheus.yml"))
job = [j for j in prom["scrape_configs"] if j["job_name"] == "dikkat"]
check(len(job) == 1, "prometheus.yml has no dikkat job")
targets = [t for sc in job[0]["static_configs"] for t in sc["targets"]] if job else []
check(targets == ["dikkat:9090"], f"prometheus.yml scrapes {targets}, not the dikkat service's metrics port")
check(mounts.get("docker/prometheus.yml") == "/etc/prometheus/prometheus.yml",
      "compose does not mount docker/prometheus.yml as Prometheus' config")

datasources = yaml.safe_load(open(f"{src}/docker/grafana/provisioning/datasources/prometheus.yml"))
uids = {d["uid"] for d in datasources["datasources"]}
check(any(d["url"] == "http://prometheus:9090" for d in datasources["datasources"]),
      "Grafana datasource does not point at the prometheus service")
providers = yaml.safe_load(open(f"{src}/docker/grafana/provisioning/dashboards/dikkat.yml"))
dash_path = providers["providers"][0]["options"]["path"]
check(mounts.get("docker/grafana/dashboards") == dash_path,
      "Grafana dashboard provider path is not where compose mounts the dashboards")
check(mounts.get("docker/grafana/provisioning") == "/etc/grafana/provisioning",
      "compose does not mount the Grafana provisioning folder")

dash = json.load(open(f"{src}/docker/grafana/dashboards/dikkat.json"))
exprs = []
for panel in dash["panels"]:
    check(panel["datasource"]["uid"] in uids, f"panel {panel['title']}: unknown datasource")
    for t in panel["targets"]:
        check(t["datasource"]["uid"] in uids, f"panel {panel['title']}: unknown datasource")
        exprs.append(t["expr"])
promql_words = {"sum", "by", "rate", "histogram_quantile", "max", "le", "model", "rpc", "code",
                "reason", "phase", "finish_reason", "job", "instance"}
for expr in exprs:
    for word in re.findall(r"\b([a-z_]+)(?=\{|\[|\s*\))", expr):
        if word in promql_words:
            continue
        check(family(word) in exported, f"dashboard queries {word}, which dikkat-server does not export")
def has(pattern):
    return any(re.search(pattern, e) for e in exprs)
check(has(r"rate\(dikkat_requests_total"), "dashboard: no request rate")
check(has(r"histogram_quantile\(0\.99, .*dikkat_request_duration_seconds_bucket"), "dashboard: no latency percentiles")
check(has(r"rate\(dikkat_generated_tokens_total"), "dashboard: no tokens/s")
check(has(r"dikkat_requests_waiting"), "dashboard: no queue")
check(has(r"dikkat_kv_cache_usage_ratio"), "dashboard: no KV cache usage")

for f in failures:
    print("FAIL:", f, file=sys.stderr)
print(f"docker configs: {len(failures)} failed ({len(exported)} metric families, {len(exprs)} dashboard queries)")
sys.exit(1 if failures else 0)
EOF
