// Clients we did not write against a running dikkat-server: the official
// `openai` npm package and curl call the OpenAI-compatible port
// (--openai_listen), the project's `dikkat` CLI calls the gRPC port of the
// same process, and the answers must agree:
//  - models.list / models.retrieve;
//  - completions.create (greedy, seeded) equal to `dikkat generate` over gRPC,
//    streamed equal to whole;
//  - chat.completions.create on a copy of models/dikkat-lm given Gemma 2's
//    chat template: whole, streamed (joined deltas, the usage chunk of
//    stream_options.include_usage) and equal to a completion of the rendered
//    prompt; the model without a template refuses chat with a 400;
//  - embeddings.create: the client's default (base64, decoded by the client)
//    equal to the float encoding, string and list input;
//  - errors as the client raises them: 400 naming the field, 401 for a wrong
//    key, 404 for an unknown model, 413, 429 with Retry-After (and the
//    client's default retry waiting it out);
//  - a stream aborted by the client (stream.controller.abort(), or an
//    AbortController's signal) cancelled in the engine (metrics), the engine
//    free at once; a queued stream too;
//  - 4 npm streams (completions and chat) and 4 `dikkat generate` calls at
//    once, each equal to its answer alone;
//  - curl: a completion, an SSE stream (`curl -N`) ending in `data: [DONE]`,
//    errors in OpenAI's shape.
// One server (with a bearer token, as a deployment would run it) on
// 127.0.0.1 with kernel-chosen ports; it must drain and exit 0 at the end.
//
//   node openai_client_test.mjs NPM_PREFIX DIKKAT_SERVER DIKKAT_CLI SOURCE_DIR
// NPM_PREFIX holds node_modules/openai (tests/deploy/npm_prefix.sh).
import { execFile, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";

const [npmPrefix, serverBin, cliBin, sourceDir] = process.argv.slice(2).map((p) => path.resolve(p));
const { default: OpenAI } = await import(
  pathToFileURL(path.join(npmPrefix, "node_modules", "openai", "index.mjs")).href);
const { version: openaiVersion } = JSON.parse(
  fs.readFileSync(path.join(npmPrefix, "node_modules", "openai", "package.json"), "utf8"));
const execFileP = promisify(execFile);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const TOKEN = "openai-client-test-token-7d41c9e2a8b6";
const LM = "dikkat-lm";      // models/dikkat-lm: no chat template (the default model)
const CHAT = "dikkat-chat";  // the same weights with Gemma 2's template

// ---- checks -----------------------------------------------------------------
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
function checkEqual(got, want, what) {
  const ok = JSON.stringify(got) === JSON.stringify(want);
  check(ok, `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  return ok;
}
// Runs one part; an exception fails it and the next part still runs.
async function part(name, fn) {
  const start = Date.now();
  const before = failures;
  try {
    await fn();
  } catch (e) {
    failures++;
    console.error(`FAIL: ${name}: ${e?.stack ?? e}`);
  }
  const seconds = ((Date.now() - start) / 1000).toFixed(2);
  console.log(`${failures === before ? "ok  " : "FAIL"} ${name} (${seconds} s)`);
}
// What `fn` throws; a failure when it does not throw.
async function thrown(fn, what) {
  try {
    await fn();
  } catch (e) {
    return e;
  }
  check(false, `${what}: no error raised`);
  return null;
}

// ---- the server -------------------------------------------------------------
const work = fs.mkdtempSync(path.join(os.tmpdir(), "openai-client-"));
const chatDir = path.join(work, CHAT);
fs.mkdirSync(chatDir);
for (const file of ["dikkat.json", "model.safetensors", "tokenizer.model"]) {
  fs.copyFileSync(path.join(sourceDir, "models", LM, file), path.join(chatDir, file));
}
const gemmaTemplate = fs.readFileSync(
  path.join(sourceDir, "tests/chat/data/chat_templates/google-gemma-2-2b-it.jinja"), "utf8");
fs.writeFileSync(path.join(chatDir, "tokenizer_config.json"),
                 JSON.stringify({ bos_token: "<s>", eos_token: "</s>", chat_template: gemmaTemplate }));

// 8 sequences run and 8 wait at most (the 429 part fills both); bodies over
// 64 KiB are refused (413).
const serverArgs = [
  `--model=${LM}=${path.join(sourceDir, "models", LM)}`, `--model=${CHAT}=${chatDir}`,
  "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0", "--openai_listen=127.0.0.1:0",
  "--threads=1", "--kv_cache_bytes=32MiB", "--max_batch_size=8", "--max_queue=8",
  "--max_message_bytes=64KiB", "--grace_period=10s",
];
let serverLog = "";
let serverOut = "";
const server = spawn(serverBin, serverArgs, {
  env: { ...process.env, DIKKAT_AUTH_TOKEN: TOKEN },
  stdio: ["ignore", "pipe", "pipe"],
});
server.stdout.on("data", (d) => { serverOut += d; });
server.stderr.on("data", (d) => { serverLog += d; });
const exited = new Promise((resolve) => server.on("exit", (code, signal) => resolve({ code, signal })));
process.on("exit", () => {
  if (server.exitCode === null) server.kill("SIGKILL");
  fs.rmSync(work, { recursive: true, force: true });
});
// Never leave the server behind: give up before ctest's timeout (180 s)
// would kill this process, and on SIGTERM/SIGINT.
for (const sig of ["SIGTERM", "SIGINT"]) process.on(sig, () => process.exit(1));
setTimeout(() => {
  console.error(`FAIL: the test took over 150 s\n${serverLog}`);
  process.exit(1);
}, 150_000).unref();

const startDeadline = Date.now() + 60_000;
while (!/serving 2 model/.test(serverLog)) {
  if (server.exitCode !== null || Date.now() > startDeadline) {
    console.error(`dikkat-server did not start:\n${serverOut}\n${serverLog}`);
    process.exit(1);
  }
  await sleep(50);
}
const grpcAddr = serverOut.match(/^listening on (\S+)$/m)[1];
const metricsAddr = serverLog.match(/metrics on http:\/\/([^/\s]+)\/metrics/)[1];
const baseURL = serverLog.match(/openai on (http:\/\/\S+\/v1)/)[1];
console.log(`openai ${openaiVersion} (node ${process.version}) -> ${baseURL}, gRPC ${grpcAddr}`);

const client = new OpenAI({ baseURL, apiKey: TOKEN, maxRetries: 0, timeout: 30_000 });

// ---- gRPC through the dikkat CLI ----------------------------------------------
// With the special tokens the model adds around an input (<bos>), as
// completions tokenize a text prompt (vLLM, `tokenizer(prompt)`).
async function grpcGenerate(prompt, maxTokens, extra = []) {
  const { stdout } = await execFileP(cliBin, [
    `--target=${grpcAddr}`, `--token=${TOKEN}`, "--timeout=30", "--attempts=1", "generate",
    "--temperature=0", "--add-special-tokens", `--max-tokens=${maxTokens}`, ...extra,
    `--prompt=${prompt}`,
  ], { encoding: "utf8" });
  return stdout;
}
// What the CLI prints for a generated text: the text, then a newline unless
// it ends with one (client/cli/generate_command.cc).
const cliPrinted = (text) => (text === "" || text.endsWith("\n") ? text : `${text}\n`);

// ---- metrics ----------------------------------------------------------------
async function scrape() {
  return (await fetch(`http://${metricsAddr}/metrics`)).text();
}
// The sum of the samples of `name` whose labels include `labels` (and pass
// `where`, given all of them).
function metric(text, name, labels = {}, where = () => true) {
  let sum = 0;
  for (const line of text.split("\n")) {
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[2] ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v) && where(have)) sum += Number(m[3]);
  }
  return sum;
}
async function waitFor(predicate, ms) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await predicate()) return true;
    await sleep(25);
  }
  return predicate();
}

// ---- streams ----------------------------------------------------------------
// Joins a completions or chat stream: text per choice, finish reasons, the
// usage chunk, the first chunk's role.
async function collect(stream) {
  const out = { text: [], finish: [], usage: null, chunks: 0, firstRole: undefined, objects: new Set() };
  for await (const chunk of stream) {
    out.chunks++;
    out.objects.add(chunk.object);
    if (chunk.usage) {
      out.usage = chunk.usage;
      check(chunk.choices.length === 0, "the usage chunk has no choices");
    }
    for (const c of chunk.choices) {
      const piece = c.delta ? c.delta.content ?? "" : c.text;
      if (out.firstRole === undefined && c.delta) out.firstRole = c.delta.role ?? null;
      out.text[c.index] = (out.text[c.index] ?? "") + piece;
      if (c.finish_reason) out.finish[c.index] = c.finish_reason;
    }
  }
  return out;
}

// ---- the parts --------------------------------------------------------------
await part("models.list / models.retrieve", async () => {
  const ids = [];
  for await (const model of client.models.list()) {
    ids.push(model.id);
    check(model.object === "model", `model object ${JSON.stringify(model)}`);
  }
  checkEqual(ids, [LM, CHAT], "models.list ids (the default first)");
  checkEqual((await client.models.retrieve(CHAT)).id, CHAT, "models.retrieve");
});

const prompt = "The king said unto them";
let greedy = null;  // the completion of `prompt`, reused by curl
await part("completions.create greedy = gRPC Generate; streamed = whole", async () => {
  const c = await client.completions.create(
    { model: LM, prompt, max_tokens: 32, temperature: 0, seed: 7 });
  greedy = c.choices[0].text;
  check(c.object === "text_completion" && c.id.startsWith("cmpl-"), `completion object ${c.object} ${c.id}`);
  checkEqual(c.model, LM, "completion model");
  check(greedy.length > 0, "the completion has text");
  check(["length", "stop"].includes(c.choices[0].finish_reason), `finish_reason ${c.choices[0].finish_reason}`);
  check(c.usage.completion_tokens > 0 && c.usage.completion_tokens <= 32 &&
        c.usage.total_tokens === c.usage.prompt_tokens + c.usage.completion_tokens,
        `usage ${JSON.stringify(c.usage)}`);
  checkEqual(await grpcGenerate(prompt, 32, ["--seed=7"]), cliPrinted(greedy),
             "dikkat generate (gRPC) prints the completion's text");
  const streamed = await collect(await client.completions.create(
    { model: LM, prompt, max_tokens: 32, temperature: 0, seed: 7, stream: true,
      stream_options: { include_usage: true } }));
  checkEqual(streamed.text, [greedy], "streamed completion text");
  checkEqual(streamed.finish, [c.choices[0].finish_reason], "streamed finish_reason");
  checkEqual(streamed.usage, c.usage, "streamed usage chunk");
});

const messages = [{ role: "user", content: "Tell me a story about the sea." }];
await part("chat.completions.create whole and streamed (template applied)", async () => {
  const chat = await client.chat.completions.create(
    { model: CHAT, messages, max_tokens: 32, temperature: 0, seed: 7 });
  check(chat.object === "chat.completion" && chat.id.startsWith("chatcmpl-"),
        `chat object ${chat.object} ${chat.id}`);
  const content = chat.choices[0].message.content;
  checkEqual(chat.choices[0].message.role, "assistant", "chat message role");
  check(typeof content === "string" && content.length > 0, "the chat answer has content");
  // What Gemma 2's template renders for these messages (jinja2's output),
  // tokenized as chat tokenizes it: its "<s>" (the model's BOS) as the BOS id.
  const rendered = `<s><start_of_turn>user\n${messages[0].content}<end_of_turn>\n<start_of_turn>model\n`;
  const { stdout: idsText } = await execFileP(cliBin, [
    `--target=${grpcAddr}`, `--token=${TOKEN}`, "--timeout=30", "--attempts=1", `--model=${CHAT}`,
    "tokenize", "--parse-special-tokens", "--ids-only", rendered]);
  const ids = idsText.trim().split(",").map(Number);
  check(ids[0] === 1 && ids.length < rendered.length, `rendered prompt's ids start with BOS: ${ids}`);
  const completion = await client.completions.create(
    { model: CHAT, prompt: ids, max_tokens: 32, temperature: 0 });
  checkEqual(content, completion.choices[0].text, "chat = completion of the rendered template");
  checkEqual(chat.usage.prompt_tokens, completion.usage.prompt_tokens, "chat prompt tokens");

  const streamed = await collect(await client.chat.completions.create(
    { model: CHAT, messages, max_tokens: 32, temperature: 0, seed: 7, stream: true,
      stream_options: { include_usage: true } }));
  checkEqual([...streamed.objects], ["chat.completion.chunk"], "chunk objects");
  checkEqual(streamed.firstRole, "assistant", "the first delta's role");
  checkEqual(streamed.text, [content], "joined deltas = the whole answer");
  checkEqual(streamed.finish, [chat.choices[0].finish_reason], "streamed finish_reason");
  checkEqual(streamed.usage, chat.usage, "include_usage chunk = the whole answer's usage");

  const e = await thrown(() => client.chat.completions.create({ model: LM, messages }),
                         "chat on a model without a template");
  check(e instanceof OpenAI.BadRequestError && e.status === 400 &&
        e.message.includes("no chat template"), `no template: ${e}`);
});

await part("embeddings.create: base64 (client default) = float; string and list", async () => {
  const sent = [];
  const recording = new OpenAI({
    baseURL, apiKey: TOKEN, maxRetries: 0,
    fetch: (url, init) => { sent.push(JSON.parse(init.body)); return fetch(url, init); },
  });
  const inputs = ["The sea was calm that night.", "four thousand two hundred seventeen"];
  const decoded = await recording.embeddings.create({ model: LM, input: inputs });
  const floats = await recording.embeddings.create({ model: LM, input: inputs, encoding_format: "float" });
  const single = await recording.embeddings.create({ model: LM, input: inputs[0] });
  checkEqual(sent.map((b) => b.encoding_format), ["base64", "float", "base64"],
             "encoding_format the client sent");
  checkEqual(decoded.data.map((d) => d.index), [0, 1], "indices");
  checkEqual(floats.data.length, 2, "float data");
  checkEqual(single.data.length, 1, "string input: one embedding");
  check(decoded.object === "list" && decoded.usage.prompt_tokens > 0, `usage ${JSON.stringify(decoded.usage)}`);
  for (let i = 0; i < 2; i++) {
    const a = decoded.data[i].embedding;
    const b = floats.data[i].embedding;
    check(Array.isArray(a) && typeof a[0] === "number", "the client decoded base64 to numbers");
    check(a.length === b.length && a.length > 0, `dimensions ${a.length} vs ${b.length}`);
    check(a.every((v, j) => v === Math.fround(b[j])), `input ${i}: base64 and float values differ`);
    const norm = Math.sqrt(a.reduce((s, v) => s + v * v, 0));
    check(Math.abs(norm - 1) < 1e-4, `input ${i}: norm ${norm}, want 1`);
  }
  checkEqual(single.data[0].embedding, decoded.data[0].embedding, "string input = the list's first");
});

await part("errors through the client: 400, 401, 404, 413", async () => {
  let e = await thrown(() => client.completions.create({ model: LM, prompt: "x", temperature: -1 }),
                       "temperature -1");
  check(e instanceof OpenAI.BadRequestError && e.status === 400 && e.message.includes("temperature") &&
        e.type === "invalid_request_error", `400: ${e} (type ${e?.type})`);
  e = await thrown(() => client.completions.create({ model: LM, prompt: "x", max_tokens: "many" }),
                   "max_tokens 'many'");
  check(e instanceof OpenAI.BadRequestError && e.message.includes("max_tokens"), `400: ${e}`);
  checkEqual(e?.param, "max_tokens", "400 param names the field");

  const stranger = new OpenAI({ baseURL, apiKey: "not-the-token-0123456789abcdef", maxRetries: 0 });
  e = await thrown(() => stranger.completions.create({ model: LM, prompt: "x", max_tokens: 2 }),
                   "a wrong key");
  check(e instanceof OpenAI.AuthenticationError && e.status === 401 && e.code === "invalid_api_key" &&
        e.headers.get("www-authenticate") === "Bearer", `401: ${e} (code ${e?.code})`);
  check(!String(e?.message).includes("not-the-token"), "the 401 does not echo the key");
  e = await thrown(() => stranger.models.list(), "models.list with a wrong key");
  check(e instanceof OpenAI.AuthenticationError, `401 on models: ${e}`);

  e = await thrown(() => client.completions.create({ model: "gpt-4", prompt: "x" }), "model gpt-4");
  check(e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === "model_not_found" &&
        e.message.includes("gpt-4"), `404: ${e} (code ${e?.code})`);
  e = await thrown(() => client.models.retrieve("gpt-4"), "models.retrieve gpt-4");
  check(e instanceof OpenAI.NotFoundError, `404 on retrieve: ${e}`);

  // Over --max_message_bytes (64 KiB): refused from its Content-Length.
  e = await thrown(() => client.completions.create({ model: LM, prompt: "x".repeat(80 << 10) }),
                   "an 80 KiB body");
  check(e instanceof OpenAI.APIError && e.status === 413 && e.message.includes("larger than"),
        `413: ${e}`);
});

await part("4 npm streams and 4 gRPC calls at once = their answers alone", async () => {
  const prompts = ["The sea was", "In the beginning", "She opened the door and", "Four men went"];
  const chats = [[{ role: "user", content: "Where is the king?" }],
                 [{ role: "user", content: "Say something about ships." }]];
  const max = 48;
  // Alone, one after the other.
  const grpcAlone = [];
  for (const p of prompts) grpcAlone.push(await grpcGenerate(p, max));
  const chatAlone = [];
  for (const m of chats) {
    chatAlone.push((await client.chat.completions.create(
      { model: CHAT, messages: m, max_tokens: max, temperature: 0 })).choices[0].message.content);
  }
  const before = await scrape();
  // At once: completions streams of prompts 0 and 1, chat streams, and the
  // CLI on all four prompts.
  const [s0, s1, c0, c1, ...grpc] = await Promise.all([
    ...prompts.slice(0, 2).map(async (p) => collect(await client.completions.create(
      { model: LM, prompt: p, max_tokens: max, temperature: 0, stream: true }))),
    ...chats.map(async (m) => collect(await client.chat.completions.create(
      { model: CHAT, messages: m, max_tokens: max, temperature: 0, stream: true }))),
    ...prompts.map((p) => grpcGenerate(p, max)),
  ]);
  checkEqual(cliPrinted(s0.text[0]), grpcAlone[0], "npm completions stream 0 = gRPC alone");
  checkEqual(cliPrinted(s1.text[0]), grpcAlone[1], "npm completions stream 1 = gRPC alone");
  checkEqual(c0.text[0], chatAlone[0], "npm chat stream 0 = chat alone");
  checkEqual(c1.text[0], chatAlone[1], "npm chat stream 1 = chat alone");
  grpc.forEach((out, i) => checkEqual(out, grpcAlone[i], `gRPC call ${i} together = alone`));
  // They did share engine steps: some decode step of dikkat-lm ran more
  // than one sequence (4 gRPC calls and 2 streams on it).
  const after = await scrape();
  const shared = (text) => metric(text, "dikkat_step_batch_size_count", { model: LM, phase: "decode" }) -
                           metric(text, "dikkat_step_batch_size_bucket", { model: LM, phase: "decode" },
                                  (labels) => Number(labels.le) === 1);
  check(shared(after) - shared(before) > 0, "no decode step ran two sequences or more together");
});

await part("curl: completion, SSE stream ending in [DONE], errors in OpenAI's shape", async () => {
  const curl = async (args) => (await execFileP("curl", ["-sS", "--max-time", "30", ...args],
                                                { encoding: "utf8", maxBuffer: 16 << 20 })).stdout;
  const auth = ["-H", `Authorization: Bearer ${TOKEN}`, "-H", "Content-Type: application/json"];
  const body = { model: LM, prompt, max_tokens: 32, temperature: 0, seed: 7 };
  const whole = JSON.parse(await curl([...auth, "-d", JSON.stringify(body), `${baseURL}/completions`]));
  checkEqual(whole.choices?.[0]?.text, greedy, "curl completion = the client's");

  const sse = await curl(["-N", ...auth, "-d", JSON.stringify({ ...body, stream: true }),
                          `${baseURL}/completions`]);
  const events = sse.split("\n\n").filter((e) => e.length > 0);
  check(events.every((e) => e.startsWith("data: ")), `SSE events: ${JSON.stringify(events.slice(0, 3))}`);
  checkEqual(events.at(-1), "data: [DONE]", "the stream's last event");
  check(sse.endsWith("data: [DONE]\n\n"), "the stream ends with data: [DONE] and a blank line");
  const text = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)).choices[0]?.text ?? "").join("");
  checkEqual(text, greedy, "curl -N stream joined");

  const bad = await curl(["-w", "\n%{http_code}", ...auth, "-d", JSON.stringify({ prompt: "x", top_p: 7 }),
                          `${baseURL}/completions`]);
  const [badBody, badCode] = [bad.slice(0, bad.lastIndexOf("\n")), bad.slice(bad.lastIndexOf("\n") + 1)];
  checkEqual(badCode, "400", "curl bad top_p status");
  const err = JSON.parse(badBody).error;
  checkEqual(Object.keys(err ?? {}).sort(), ["code", "message", "param", "type"], "error object fields");
  check(err?.message.includes("top_p") && err?.type === "invalid_request_error", `400 body ${badBody}`);

  const head = await curl(["-i", "-H", "Authorization: Bearer wrong-0123456789abcdef0123", `${baseURL}/models`]);
  check(/^HTTP\/1\.1 401/.test(head) && /^www-authenticate: Bearer\r?$/im.test(head) &&
        head.includes('"authentication_error"'), `curl 401: ${head}`);
});

await part("abort a stream: cancelled in the engine, engine free at once", async () => {
  const before = await scrape();
  const maxTokens = 200;
  const stream = await client.completions.create(
    { model: LM, prompt: "Once upon a time", max_tokens: maxTokens, ignore_eos: true, temperature: 0,
      stream: true });
  let received = 0;
  for await (const chunk of stream) {
    received += chunk.choices.length;
    if (received === 2) stream.controller.abort();  // the loop then ends without an error
  }
  check(received >= 2, `received ${received} chunks before aborting`);
  let text = "";
  const freed = await waitFor(async () => {
    text = await scrape();
    return metric(text, "dikkat_requests_running", { model: LM }) === 0 &&
           metric(text, "dikkat_kv_cache_blocks_used", { model: LM }) === 0 &&
           metric(text, "dikkat_generate_finished_total", { model: LM, finish_reason: "cancelled" }) -
             metric(before, "dikkat_generate_finished_total", { model: LM, finish_reason: "cancelled" }) === 1;
  }, 10_000);
  check(freed, "after the abort: running 0, no KV block held, one generation finished 'cancelled'");
  const generated = metric(text, "dikkat_generated_tokens_total", { model: LM }) -
                    metric(before, "dikkat_generated_tokens_total", { model: LM });
  check(generated < maxTokens, `the aborted stream generated ${generated} of its ${maxTokens} tokens`);
  const start = Date.now();
  const next = await client.completions.create({ model: LM, prompt: "Hello", max_tokens: 8, temperature: 0 });
  const ms = Date.now() - start;
  check(next.choices[0].text.length > 0 && ms < 5000, `the next request took ${ms} ms`);
});

await part("429 with Retry-After; the client's own retry waits it out; aborted streams cancelled", async () => {
  const before = await scrape();
  // 8 samples fill the batch (--max_batch_size=8), 8 more fill the queue
  // (--max_queue=8); one more request is refused. The running stream is
  // aborted with stream.controller.abort(), the queued one with an
  // AbortController's signal.
  const long = { model: LM, prompt: "x", max_tokens: 240, ignore_eos: true, temperature: 1, seed: 1,
                 n: 8, stream: true };
  const running = await client.completions.create(long);
  const runningIt = running[Symbol.asyncIterator]();
  await runningIt.next();  // its first chunk: the batch is full
  const abortQueued = new AbortController();
  const queued = await client.completions.create(long, { signal: abortQueued.signal });
  const queuedIt = queued[Symbol.asyncIterator]();
  const queuedFirst = queuedIt.next();
  check(await waitFor(async () => metric(await scrape(), "dikkat_requests_waiting", { model: LM }) >= 8, 10_000),
        "8 samples wait");
  const e = await thrown(() => client.completions.create({ model: LM, prompt: "y", max_tokens: 2 }),
                         "a request with a full queue");
  const retryAfter = Number(e?.headers?.get("retry-after"));
  check(e instanceof OpenAI.RateLimitError && e.status === 429 && e.type === "rate_limit_error" &&
        retryAfter >= 1, `429: ${e} (retry-after ${retryAfter})`);

  // A client with its default retries gets the 429, waits Retry-After and
  // tries again: by then the queue is empty and the request is served.
  const attempts = [];
  const retrying = new OpenAI({
    baseURL, apiKey: TOKEN, maxRetries: 2,
    fetch: async (url, init) => {
      const response = await fetch(url, init);
      attempts.push({ status: response.status, at: Date.now() });
      return response;
    },
  });
  // ignore_eos: sampled at the default temperature, the answer could end
  // with the end-of-text token after 1 token (seen once in 7 runs).
  const retried = retrying.completions.create({ model: LM, prompt: "y", max_tokens: 2,
                                               ignore_eos: true });
  check(await waitFor(() => attempts.length > 0, 10_000), "the retrying client's first attempt");
  const stillRunning = metric(await scrape(), "dikkat_requests_running", { model: LM });
  check(stillRunning === 8, `the 8-sample stream still ran when the 429s came (running ${stillRunning})`);
  running.controller.abort();
  abortQueued.abort();
  await Promise.allSettled([queuedFirst, runningIt.next()]);
  let text = "";
  const freed = await waitFor(async () => {
    text = await scrape();
    return metric(text, "dikkat_requests_running", { model: LM }) === 0 &&
           metric(text, "dikkat_requests_waiting", { model: LM }) === 0 &&
           metric(text, "dikkat_kv_cache_blocks_used", { model: LM }) === 0;
  }, 10_000);
  check(freed, "after aborting both: nothing runs or waits, no KV block held");
  const cancelled = metric(text, "dikkat_generate_finished_total", { model: LM, finish_reason: "cancelled" }) -
                    metric(before, "dikkat_generate_finished_total", { model: LM, finish_reason: "cancelled" });
  // One per call, whatever its number of samples (server/engine.cc).
  checkEqual(cancelled, 2, "generate calls finished 'cancelled' (the running one and the queued one)");

  const served = await retried;
  checkEqual(served.usage.completion_tokens, 2, "the retried request's answer");
  checkEqual(attempts.map((a) => a.status), [429, 200], "the retrying client's attempts");
  if (attempts.length === 2) {
    const waited = attempts[1].at - attempts[0].at;
    check(waited >= retryAfter * 1000 - 50, `the client waited ${waited} ms, Retry-After said ${retryAfter} s`);
  }
});

// ---- drain ------------------------------------------------------------------
server.kill("SIGTERM");
const { code, signal } = await exited;
check(code === 0, `dikkat-server exited ${code ?? signal} after SIGTERM`);
if (failures > 0) console.error(`--- dikkat-server log (tail)\n${serverLog.split("\n").slice(-20).join("\n")}`);
console.log(`${passes} checks passed, ${failures} failed`);
process.exit(failures > 0 ? 1 : 0);
