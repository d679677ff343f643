// Validates deploy/kubernetes/*.yaml:
//  1. every object against the Kubernetes OpenAPI schema, with the npm package
//     kubernetes-models (its generated ajv validators: types, required fields,
//     enums, formats; like the schema, they do not reject unknown fields);
//  2. the wiring the schema cannot see: probes are native gRPC probes on the
//     server's gRPC port, every server flag exists in the real dikkat-server
//     binary, resources cover the documented memory formula, the Service is
//     headless and selects the pods, the PDB selects them, the HPA scales the
//     Deployment on metrics that the prometheus-adapter rules serve, and those
//     rules read series dikkat-server exports.
//
//   node validate_kubernetes.mjs NPM_PREFIX SOURCE_DIR DIKKAT_SERVER
// NPM_PREFIX holds node_modules/{kubernetes-models,js-yaml}.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const [npmPrefix, sourceDir, serverBinary] = process.argv.slice(2).map((p) => path.resolve(p));
const require = createRequire(path.join(npmPrefix, "node_modules", "noop.js"));
const yaml = require("js-yaml");
const modelsDir = path.join(npmPrefix, "node_modules", "kubernetes-models");
const dir = path.join(sourceDir, "deploy", "kubernetes");

let failures = 0;
let passes = 0;
function check(ok, what) {
  if (ok) {
    passes++;
  } else {
    failures++;
    console.error(`FAIL: ${what}`);
  }
}

// ---- 1. schema --------------------------------------------------------------
const objects = [];
const files = fs.readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort();
for (const file of files) {
  for (const doc of yaml.loadAll(fs.readFileSync(path.join(dir, file), "utf8"))) {
    if (doc) objects.push({ file, doc });
  }
}

async function modelClass(apiVersion, kind) {
  // "apps/v1" -> apps/v1/Kind; "v1" -> v1/Kind.
  const modulePath = path.join(modelsDir, ...apiVersion.split("/"), `${kind}.js`);
  if (!fs.existsSync(modulePath)) return null;
  const module = await import(modulePath);
  return module[kind];
}

for (const { file, doc } of objects) {
  if (doc.kind === "Kustomization") continue;  // not an API object; checked below
  const Model = await modelClass(doc.apiVersion, doc.kind);
  check(Model !== null, `${file}: no schema for ${doc.apiVersion} ${doc.kind}`);
  if (!Model) continue;
  try {
    new Model(doc).validate();
    check(true);
  } catch (e) {
    check(false, `${file}: ${doc.kind}/${doc.metadata?.name}: ${e.message}`);
  }
}

// ---- 2. wiring --------------------------------------------------------------
const find = (kind) => objects.filter((o) => o.doc.kind === kind).map((o) => o.doc);
const [deployment] = find("Deployment");
const [service] = find("Service");
const [pdb] = find("PodDisruptionBudget");
const [hpa] = find("HorizontalPodAutoscaler");
const configMaps = find("ConfigMap");
const [kustomization] = find("Kustomization");
const missing = Object.entries({ deployment, service, pdb, hpa, kustomization })
  .filter(([, o]) => o === undefined);
for (const [name] of missing) check(false, `no ${name} in ${dir}`);
if (missing.length > 0) finish();

const podLabels = deployment.spec.template.metadata.labels;
const selects = (selector) =>
  Object.entries(selector).every(([k, v]) => podLabels[k] === v);
check(selects(deployment.spec.selector.matchLabels), "Deployment selector does not match its pods");
check(selects(service.spec.selector), "Service selector does not match the pods");
check(selects(pdb.spec.selector.matchLabels), "PodDisruptionBudget selector does not match the pods");

const container = deployment.spec.template.spec.containers[0];
const grpcPort = container.ports.find((p) => p.name === "grpc");
const metricsPort = container.ports.find((p) => p.name === "metrics");
check(grpcPort !== undefined && metricsPort !== undefined, "container ports 'grpc' and 'metrics'");
for (const probe of ["startupProbe", "readinessProbe", "livenessProbe"]) {
  check(container[probe]?.grpc?.port === grpcPort?.containerPort,
        `${probe} is not a native gRPC probe on the gRPC port`);
}

// Flags: each must be a flag of the real binary.
const help = (() => {
  try {
    return execFileSync(serverBinary, ["--helpfull"], { encoding: "utf8", stdio: "pipe" });
  } catch (e) {
    return (e.stdout ?? "") + (e.stderr ?? "");  // absl exits 1 after --helpfull
  }
})();
const knownFlags = new Set([...help.matchAll(/^\s+--([a-z0-9_]+) \(/gm)].map((m) => m[1]));
check(knownFlags.has("max_connection_age"), "could not read dikkat-server --helpfull");
const flags = {};
for (const arg of container.args ?? []) {
  const m = /^--([a-z0-9_]+)=(.*)$/.exec(arg);
  check(m !== null, `argument '${arg}' is not --flag=value`);
  if (!m) continue;
  check(knownFlags.has(m[1]), `--${m[1]} is not a dikkat-server flag`);
  flags[m[1]] = m[2];
}
check(flags.max_connection_age !== undefined, "--max_connection_age is not set");
// The image's entry point adds the listen addresses; the ports must agree.
check(grpcPort?.containerPort === 50051 && metricsPort?.containerPort === 9090,
      "container ports differ from the image's 50051 / 9090");

// Resources: threads = CPU request; memory request covers the formula.
const quantity = (q) => {
  const m = /^([0-9.]+)(m|Ki|Mi|Gi|k|M|G)?$/.exec(String(q));
  const mult = { m: 1e-3, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, k: 1e3, M: 1e6, G: 1e9 };
  return m ? parseFloat(m[1]) * (m[2] ? mult[m[2]] : 1) : NaN;
};
const bytes = (s) => {  // dikkat's ByteSize flags: 128MiB, 2GiB or plain bytes
  const m = /^([0-9.]+)(KiB|MiB|GiB)?$/.exec(s ?? "");
  return m ? parseFloat(m[1]) * ({ KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 }[m[2]] ?? 1) : NaN;
};
const req = container.resources?.requests ?? {};
const lim = container.resources?.limits ?? {};
check(Number(flags.threads) === quantity(req.cpu), "--threads differs from the CPU request");
const kv = bytes(flags.kv_cache_bytes);
check(!Number.isNaN(kv), "--kv_cache_bytes is not set in MiB/GiB");
// Runtime ~185 MiB + per model (2 by default) its KV cache; weights on top.
check(quantity(req.memory) >= 185 * 1024 ** 2 + 2 * kv, "memory request below 185 MiB + 2 x KV cache");
check(quantity(lim.memory) >= quantity(req.memory), "memory limit below the request");

// Draining fits in the termination grace period.
const grace = /^(\d+)s$/.exec(flags.grace_period ?? "");
const preStop = container.lifecycle?.preStop?.exec?.command ?? [];
const preStopSeconds = preStop[0] === "sleep" ? Number(preStop[1]) : 0;
check(grace !== null, "--grace_period is not set in seconds");
check(deployment.spec.template.spec.terminationGracePeriodSeconds >
        Number(grace?.[1]) + 2 + preStopSeconds,
      "terminationGracePeriodSeconds does not cover preStop + --grace_period + 2 s shutdown");

// Headless Service on the gRPC port.
check(service.spec.clusterIP === "None", "Service is not headless (clusterIP: None)");
check(service.spec.ports.some((p) => p.port === grpcPort?.containerPort &&
                               (p.targetPort === "grpc" || p.targetPort === grpcPort?.containerPort)),
      "Service does not expose the gRPC port");

// HPA -> Deployment; its metrics -> adapter rules -> exported series.
check(hpa.spec.scaleTargetRef.kind === "Deployment" &&
        hpa.spec.scaleTargetRef.name === deployment.metadata.name,
      "HPA does not target the Deployment");
const adapterRules = configMaps
  .filter((c) => c.data?.["config.yaml"])
  .flatMap((c) => yaml.load(c.data["config.yaml"]).rules ?? []);
const served = new Set(adapterRules.map((r) => r.name?.as));
const hpaMetrics = hpa.spec.metrics.filter((m) => m.type === "Pods").map((m) => m.pods.metric.name);
check(hpaMetrics.includes("dikkat_requests_waiting"), "HPA does not scale on the queue metric");
for (const name of hpaMetrics) {
  check(served.has(name), `HPA metric ${name} has no prometheus-adapter rule`);
}
const exported = new Set(
  [...fs.readFileSync(path.join(sourceDir, "server", "metrics.cc"), "utf8")
     .matchAll(/\.Name\("([a-z_]+)"\)/g)].map((m) => m[1]));
for (const rule of adapterRules) {
  const series = /^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(rule.seriesQuery)?.[1];
  check(exported.has(series), `adapter rule reads ${series}, which dikkat-server does not export`);
  check(new RegExp(rule.name.matches).test(series), `adapter rule name.matches misses ${series}`);
  for (const label of ["namespace", "pod"]) {
    check(rule.resources?.overrides?.[label] !== undefined, `adapter rule lacks the ${label} override`);
  }
}

// The kustomization lists every manifest.
const listed = new Set(kustomization.resources);
for (const file of files) {
  if (file === "kustomization.yaml") continue;
  check(listed.has(file), `kustomization.yaml does not list ${file}`);
}
for (const file of listed) check(fs.existsSync(path.join(dir, file)), `kustomization lists missing ${file}`);

finish();

function finish() {
  console.log(`${objects.length} objects in ${files.length} files; ${passes} passed, ${failures} failed`);
  process.exit(failures === 0 ? 0 : 1);
}
