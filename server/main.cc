// dikkat-server: loads the models, serves dikkat.v1.Dikkat (plus health and
// reflection) over gRPC and Prometheus metrics over HTTP. Wiring only: the
// work is in the engine, the service and the metrics.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sync.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "model/memory_pages.h"
#include "server/byte_size.h"
#include "server/engine.h"
#include "server/health_service.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/model_registry.h"
#include "server/openai_http.h"
#include "server/runtime.h"
#include "server/security.h"
#include "server/service.h"

#ifndef DIKKAT_VERSION
#define DIKKAT_VERSION "dev"
#endif

using dikkat::server::ByteSize;

ABSL_FLAG(std::vector<std::string>, model, {},
          "Model folder to serve, as name=path or path (the name is then the folder's name). "
          "Repeat the flag or give a comma-separated list to host several models; the first "
          "is the default for requests that name none.");
ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "gRPC address host:port. Port 0 picks a free port; the chosen one is printed as "
          "'listening on HOST:PORT'.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9090",
          "HTTP address for /metrics (Prometheus text format) and /healthz. Empty disables it.");
ABSL_FLAG(std::string, openai_listen, "",
          "HTTP address host:port of the OpenAI-compatible API (/v1/completions, "
          "/v1/chat/completions, /v1/embeddings, /v1/models) over the same models, limits and "
          "bearer tokens as gRPC. Empty (the default) disables it. Port 0 picks a free port; the "
          "chosen one is printed as 'openai on http://HOST:PORT/v1'.");
ABSL_FLAG(int32_t, openai_max_connections, 64,
          "Connections the OpenAI HTTP port serves at once (a stream holds one for its whole "
          "length); as many more may wait, past that new ones get 503.");
ABSL_FLAG(ByteSize, openai_max_body_bytes, ByteSize{8ll << 20},
          "Largest request body on the OpenAI HTTP port, refused with 413 from its "
          "Content-Length before it is read. Parsed JSON takes several times its text, so this "
          "is kept below --max_message_bytes; the smaller of the two applies. Must be > 0.");
ABSL_FLAG(std::string, openai_reasoning_parser, "",
          "Chat answers of thinking models (DeepSeek-R1, Qwen3, QwQ): 'think' answers the text "
          "between <think> and </think> as message.reasoning_content (streamed as "
          "delta.reasoning_content) and what follows as the content, in vLLM's "
          "--reasoning-parser fields (its names deepseek_r1 and qwen3 are accepted and mean the "
          "same here; docs/api.md says where they differ). Empty (the default): the whole answer "
          "is the content.");
ABSL_FLAG(std::string, device, "cpu", "Device for every model: cpu or cuda:N.");
ABSL_FLAG(std::string, dtype, "float32",
          "Weights dtype: float32, bfloat16, float16, int8 (weight-only int8 "
          "quantization at load, CPU only; activations float32), or auto (the dtype the "
          "checkpoint was saved in: config.json's torch_dtype; float32 when it says none).");
ABSL_FLAG(std::string, kv_cache_dtype, "auto",
          "KV cache dtype: auto (the weights' dtype; float32 for int8), float32, bfloat16 or "
          "float16. 16 bits hold twice the tokens in --kv_cache_bytes and halve what a decode "
          "step reads of it; keys and values are rounded as they are written.");
ABSL_FLAG(int32_t, threads, 0,
          "LibTorch intra-op threads (at::set_num_threads); 0 = the number of cores.");
ABSL_FLAG(int32_t, max_batch_size, 64, "Most sequences an engine runs in one step.");
ABSL_FLAG(int32_t, max_batch_tokens, 2048,
          "Most tokens through one forward (the prefill budget per step).");
ABSL_FLAG(ByteSize, kv_cache_bytes, ByteSize{256ll << 20},
          "KV cache memory per model, e.g. 256MiB, 2GiB or a plain number of bytes.");
ABSL_FLAG(int32_t, kv_block_size, 16, "Tokens per KV cache block.");
ABSL_FLAG(int64_t, max_context, 0,
          "Serve each model with a context (prompt + generated tokens) of at most this many "
          "tokens; 0 = the model's max_positions. The KV cache must hold one full context: a "
          "32K-context model needs this, or more --kv_cache_bytes.");
ABSL_FLAG(bool, huge_pages, true,
          "CPU: ask the kernel for 2 MiB pages (transparent huge pages, madvise) for the "
          "weights and the KV cache, which every decode step streams: fewer TLB misses. Needs "
          "THP 'madvise' or 'always'; with 'never' it changes nothing. --nohuge_pages turns it "
          "off.");
ABSL_FLAG(absl::Duration, priority_aging, absl::Seconds(10),
          "A waiting Generate request's priority rises by one per this much time queued, so "
          "lower priorities are delayed, never starved; 0 turns ageing off.");
ABSL_FLAG(bool, prefix_caching, true,
          "Reuse the KV cache of full blocks across Generate requests that share a prompt "
          "prefix (decoder-only models); --noprefix_caching turns it off.");
ABSL_FLAG(int32_t, max_queue, 256,
          "Waiting requests per model before new ones get RESOURCE_EXHAUSTED.");
ABSL_FLAG(int32_t, max_new_tokens_cap, 4096, "Largest max_new_tokens a request may ask for.");
ABSL_FLAG(int32_t, default_max_new_tokens, 64,
          "max_new_tokens for requests that leave it unset.");
ABSL_FLAG(absl::Duration, grace_period, absl::Seconds(30),
          "On SIGTERM/SIGINT: how long in-flight requests may run before they are cancelled.");
ABSL_FLAG(absl::Duration, max_connection_age, absl::ZeroDuration(),
          "Close client connections after this age (GRPC_ARG_MAX_CONNECTION_AGE_MS) so that "
          "clients re-resolve and rebalance across replicas; 0 = never. New calls go to a new "
          "connection; calls in flight keep the old one for --max_connection_age_grace.");
ABSL_FLAG(absl::Duration, max_connection_age_grace, absl::InfiniteDuration(),
          "With --max_connection_age: how long calls in flight on an aged connection may still "
          "run before it is closed under them (GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS). The "
          "default, inf, lets every generation finish.");
ABSL_FLAG(absl::Duration, max_connection_idle, absl::Minutes(5),
          "Close client connections that have had no call for this long "
          "(GRPC_ARG_MAX_CONNECTION_IDLE_MS); clients reconnect on their next call. 0 = never.");
ABSL_FLAG(absl::Duration, keepalive_time, absl::Minutes(1),
          "Ping a client after this long without activity on its connection and close the "
          "connection (cancelling its calls, which frees their KV cache) if the ping is not "
          "answered within 20s (GRPC_ARG_KEEPALIVE_TIME_MS). 0 = no pings.");
ABSL_FLAG(int32_t, max_concurrent_streams, 1024,
          "Most calls open at once on one client connection (HTTP/2 "
          "SETTINGS_MAX_CONCURRENT_STREAMS); further calls wait in the client until one ends.");
ABSL_FLAG(ByteSize, grpc_memory_bytes, ByteSize{0},
          "Memory the gRPC transport may use for all connections together (a "
          "grpc::ResourceQuota); past it gRPC closes idle connections and then fails calls with "
          "RESOURCE_EXHAUSTED. 0 = 4 x --max_message_bytes, at least 256MiB.");
ABSL_FLAG(ByteSize, max_text_bytes, ByteSize{0},
          "Largest text in one request field (Generate/Attention input, each Encode input, "
          "Tokenize), refused with INVALID_ARGUMENT before it is tokenized. 0 = per model, "
          "max_positions x 32 bytes.");
ABSL_FLAG(ByteSize, max_message_bytes, ByteSize{64ll << 20},
          "Largest request message received, e.g. 64MiB; larger ones fail with "
          "RESOURCE_EXHAUSTED before they are parsed.");
ABSL_FLAG(ByteSize, max_response_bytes, ByteSize{64ll << 20},
          "Largest response message sent. Encode and Attention calls whose answer would be "
          "larger fail with INVALID_ARGUMENT before any work is done.");
ABSL_FLAG(ByteSize, max_stream_pending_bytes, ByteSize{4ll << 20},
          "Generate output held for one stream whose client does not read (one write is in "
          "flight; the rest waits). Past it the generation is cancelled and the call ended. "
          "0 = no limit.");
ABSL_FLAG(ByteSize, max_pending_output_bytes, ByteSize{256ll << 20},
          "Generate output held for all such streams together; the stream that would pass it "
          "is cut the same way. 0 = no limit.");
ABSL_FLAG(ByteSize, max_held_output_bytes, ByteSize{256ll << 20},
          "Generate output a model's engine holds until the call ends (best_of > n: every "
          "sample's tokens and logprobs until the last sample finishes), all calls together. "
          "The call that would pass it fails with RESOURCE_EXHAUSTED. 0 = no limit.");
ABSL_FLAG(int32_t, max_batch_entries, 64, "Most inputs one Encode call may carry.");
ABSL_FLAG(int64_t, max_attention_values, 16ll << 20,
          "Most attention weights (layers x heads x queries x keys) one Attention call may "
          "return, and most one layer may compute (all its heads x queries x keys, before "
          "heads are selected or aggregated).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain for TLS on the gRPC port (with --tls_key). Empty = plaintext.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle for mutual TLS: clients must present a certificate signed by it "
          "(needs --tls_cert and --tls_key).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File of bearer tokens (one per line, '#' comments) that callers must send as "
          "'authorization: Bearer <token>'; grpc.health.v1 stays open. Alternatively set the "
          "environment variable DIKKAT_AUTH_TOKEN. Empty and unset = no authentication.");

namespace dikkat::server {
namespace {

constexpr char kServiceName[] = "dikkat.v1.Dikkat";

// Shared with the signal thread, which is detached and may outlive Run().
dikkat::Notification g_stop;
std::atomic<int> g_received_signal{0};

// absl keeps only the last occurrence of a flag; --model may be repeated, so
// collect every occurrence before absl parses the command line.
std::vector<std::string> CollectRepeatedFlag(int argc, char** argv, absl::string_view name) {
  std::vector<std::string> values;
  const std::string single = absl::StrCat("-", name), dbl = absl::StrCat("--", name);
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    for (const std::string& prefix : {dbl, single}) {
      if (arg == prefix && i + 1 < argc) {
        values.emplace_back(argv[++i]);
        break;
      }
      if (absl::StartsWith(arg, prefix + "=")) {
        values.emplace_back(arg.substr(prefix.size() + 1));
        break;
      }
    }
  }
  return values;
}

EngineOptions OptionsFromFlags() {
  EngineOptions o;
  o.device = absl::GetFlag(FLAGS_device);
  o.dtype = absl::GetFlag(FLAGS_dtype);
  o.kv_cache_dtype = absl::GetFlag(FLAGS_kv_cache_dtype);
  o.max_batch_size = absl::GetFlag(FLAGS_max_batch_size);
  o.max_batch_tokens = absl::GetFlag(FLAGS_max_batch_tokens);
  o.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_bytes).bytes;
  o.kv_block_size = absl::GetFlag(FLAGS_kv_block_size);
  o.max_context = absl::GetFlag(FLAGS_max_context);
  o.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  o.prefix_caching = absl::GetFlag(FLAGS_prefix_caching);
  o.priority_aging = absl::GetFlag(FLAGS_priority_aging);
  o.max_queue = absl::GetFlag(FLAGS_max_queue);
  o.max_new_tokens_cap = absl::GetFlag(FLAGS_max_new_tokens_cap);
  o.default_max_new_tokens = absl::GetFlag(FLAGS_default_max_new_tokens);
  o.max_batch_entries = absl::GetFlag(FLAGS_max_batch_entries);
  o.max_attention_values = absl::GetFlag(FLAGS_max_attention_values);
  o.max_held_output_bytes = absl::GetFlag(FLAGS_max_held_output_bytes).bytes;
  return o;
}

double MiB(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// For the load line: how much of the process the kernel backs with 2 MiB
// pages so far (the weights and KV caches ask for them: --huge_pages).
std::string DescribeHugePages(const EngineOptions& options) {
  const std::string mode = model::TransparentHugePagesMode();
  const int64_t bytes = model::ProcessHugePageBytes();
  const std::string backed =
      bytes < 0 ? std::string("unknown")
                : absl::StrFormat("%.1f MiB of the process", MiB(bytes));
  std::string asked = "weights and KV cache advised for 2 MiB pages";
  if (!options.huge_pages) {
    asked = "--nohuge_pages";
  } else if (options.device != "cpu") {
    asked = "2 MiB page advice on the CPU only";
  } else if (!model::HugePageArenaSupported()) {
    asked = "no 2 MiB page advice in this build (AddressSanitizer or not Linux)";
  }
  return absl::StrCat(asked, "; in 2 MiB pages: ", backed, " (transparent huge pages: ", mode,
                      ")");
}

// Threads gRPC may start for synchronous handlers (server reflection; the
// dikkat and health services are callback services and use none).
constexpr int kMaxGrpcThreads = 32;
// Clients may send a keepalive ping this often without data (gRPC's default
// is one per 5 minutes: a client keepalive of 30 s would be disconnected as
// abusive); faster pingers get GOAWAY after 2 strikes.
constexpr int kMinClientPingIntervalMs = 10 * 1000;
constexpr int kKeepaliveTimeoutMs = 20 * 1000;
// The default transport memory is 4 x --max_message_bytes, but never less
// than this: the quota covers every connection's read buffers, not only
// large messages (a 16 KiB quota for --max_message_bytes=4KiB made gRPC
// answer GOAWAY to ordinary calls). Explicit values below the second are
// refused for the same reason.
constexpr int64_t kDefaultMinGrpcMemoryBytes = 256ll << 20;
constexpr int64_t kMinGrpcMemoryBytes = 32ll << 20;

// The transport's limits on connections, from the flags (docs/security.md).
struct TransportLimits {
  int32_t max_concurrent_streams = 0;
  absl::Duration max_connection_idle;
  absl::Duration max_connection_age;
  absl::Duration max_connection_age_grace;
  absl::Duration keepalive_time;
  int64_t memory_bytes = 0;
};

// INVALID_ARGUMENT names the flag.
absl::StatusOr<TransportLimits> TransportLimitsFromFlags(int64_t max_message_bytes) {
  TransportLimits t;
  t.max_concurrent_streams = absl::GetFlag(FLAGS_max_concurrent_streams);
  t.max_connection_idle = absl::GetFlag(FLAGS_max_connection_idle);
  t.max_connection_age = absl::GetFlag(FLAGS_max_connection_age);
  t.max_connection_age_grace = absl::GetFlag(FLAGS_max_connection_age_grace);
  t.keepalive_time = absl::GetFlag(FLAGS_keepalive_time);
  t.memory_bytes = absl::GetFlag(FLAGS_grpc_memory_bytes).bytes;
  if (t.memory_bytes == 0) {
    t.memory_bytes = std::max<int64_t>(kDefaultMinGrpcMemoryBytes, 4 * max_message_bytes);
  }
  if (t.max_concurrent_streams < 1) {
    return absl::InvalidArgumentError("--max_concurrent_streams must be >= 1");
  }
  for (const auto& [name, d] : {std::pair<const char*, absl::Duration>{"max_connection_idle",
                                                                       t.max_connection_idle},
                                {"max_connection_age", t.max_connection_age},
                                {"max_connection_age_grace", t.max_connection_age_grace},
                                {"keepalive_time", t.keepalive_time}}) {
    if (d < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " must not be negative"));
    }
  }
  if (t.memory_bytes < kMinGrpcMemoryBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--grpc_memory_bytes=", FormatByteSize(t.memory_bytes), " is too small: the transport's "
        "buffers for every connection come out of it; give at least ",
        FormatByteSize(kMinGrpcMemoryBytes)));
  }
  if (t.memory_bytes < max_message_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--grpc_memory_bytes=", FormatByteSize(t.memory_bytes),
        " is smaller than --max_message_bytes=", FormatByteSize(max_message_bytes),
        ": one largest request could never be received"));
  }
  return t;
}

// A duration as a gRPC channel argument in milliseconds (infinite -> INT_MAX,
// which gRPC reads as "never").
int ChannelMs(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return INT_MAX;
  return static_cast<int>(std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, INT_MAX));
}

void SetConnectionLimits(const TransportLimits& t, grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, t.max_concurrent_streams);
  if (t.max_connection_idle > absl::ZeroDuration()) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, ChannelMs(t.max_connection_idle));
  }
  if (t.max_connection_age > absl::ZeroDuration()) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, ChannelMs(t.max_connection_age));
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                                ChannelMs(t.max_connection_age_grace));
  }
  if (t.keepalive_time > absl::ZeroDuration()) {
    builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ChannelMs(t.keepalive_time));
    builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kKeepaliveTimeoutMs);
    // Keep pinging a client whose calls are queued or prefilling (no data
    // for a while): gRPC stops after 2 pings without data by default.
    builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              kMinClientPingIntervalMs);
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  grpc::ResourceQuota quota("dikkat-server");
  quota.Resize(static_cast<size_t>(t.memory_bytes));
  quota.SetMaxThreads(kMaxGrpcThreads);
  builder->SetResourceQuota(quota);
}

// Loads every model; false (after printing why) if one fails.
bool LoadModels(const std::vector<ModelSpec>& specs, const EngineOptions& options,
                Metrics* metrics, ModelRegistry* registry, const dikkat::Notification& stop) {
  for (const ModelSpec& spec : specs) {
    if (stop.HasBeenNotified()) return false;
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(spec.name, spec.path, options, metrics->AddModel(spec.name));
    if (!engine.ok()) {
      absl::FPrintF(stderr, "dikkat-server: cannot load model '%s' from %s: %s\n", spec.name,
                    spec.path, engine.status().ToString());
      return false;
    }
    const ModelDescription& d = (*engine)->description();
    const EngineStats stats = (*engine)->stats();
    absl::FPrintF(stderr,
                  "dikkat-server: loaded '%s' from %s in %.2fs: %s, %s on %s, weights %.1f MiB, "
                  "KV cache %.1f MiB of %s (%d blocks x %d tokens); %s\n",
                  spec.name, spec.path, absl::ToDoubleSeconds(absl::Now() - start),
                  model::ArchitectureName(d.config.architecture), d.dtype, d.device,
                  MiB(d.weights_bytes), MiB(stats.kv_cache_bytes), d.kv_cache_dtype,
                  stats.kv_blocks_total, stats.kv_block_size, DescribeHugePages(options));
    metrics->SetModelLoaded(spec.name, d, engine->get());
    absl::Status added = registry->Add(spec.name, std::move(*engine));
    if (!added.ok()) {
      absl::FPrintF(stderr, "dikkat-server: %s\n", added.ToString());
      return false;
    }
  }
  return true;
}

// Returns once no call has reached `service` for `quiet`, or after `most`.
void LingerUntilCallersStop(const DikkatService& service, absl::Duration quiet,
                            absl::Duration most) {
  const absl::Time give_up = absl::Now() + most;
  int64_t seen = service.calls_started();
  absl::Time last_change = absl::Now();
  while (absl::Now() < give_up && absl::Now() - last_change < quiet) {
    absl::SleepFor(absl::Milliseconds(10));
    const int64_t now_seen = service.calls_started();
    if (now_seen != seen) {
      seen = now_seen;
      last_change = absl::Now();
    }
  }
}

int Run(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "dikkat-server --model=[name=]path [--model=...] [--listen=host:port] [flags]\n"
      "Serves Transformer models over gRPC (dikkat.v1.Dikkat, health, reflection) and "
      "Prometheus metrics over HTTP.");
  // --help lists the flags defined in this file (absl's default looks for a
  // file named after the binary, which "dikkat-server" does not match).
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "server/main.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
  std::vector<std::string> model_flags = CollectRepeatedFlag(argc, argv, "model");
  absl::ParseCommandLine(argc, argv);

  // Block SIGTERM/SIGINT before any thread starts (threads inherit the mask)
  // and take them with sigwait on one thread: no code runs in signal context.
  // A background job of a non-interactive shell starts with SIGINT ignored,
  // and an ignored signal is discarded even while blocked: restore the
  // default so that sigwait can see it.
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread([signals] {
    int sig = 0;
    if (sigwait(&signals, &sig) == 0) g_received_signal = sig;
    g_stop.Notify();
    // A second SIGTERM/SIGINT during the drain: the operator wants out now.
    // Exit without running destructors (engine threads are still working),
    // with the code a shell reports for a process killed by that signal.
    if (sigwait(&signals, &sig) == 0) {
      absl::FPrintF(stderr,
                    "dikkat-server: second %s during the drain: exiting now (code %d), calls in "
                    "flight are cut off\n",
                    sig == SIGINT ? "SIGINT" : "SIGTERM", 128 + sig);
      std::fflush(stderr);
      std::_Exit(128 + sig);
    }
  }).detach();
  dikkat::Notification& stop = g_stop;

  absl::StatusOr<std::vector<ModelSpec>> specs = ParseModelSpecs(model_flags);
  if (!specs.ok() || specs->empty()) {
    absl::FPrintF(stderr, "dikkat-server: %s\n",
                  specs.ok() ? "no model given: pass --model=[name=]path" : specs.status().ToString());
    return 2;
  }
  // Security settings are checked before the slow model loading so that a
  // typo in a path fails at once.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = MakeServerCredentials(
      {absl::GetFlag(FLAGS_tls_cert), absl::GetFlag(FLAGS_tls_key),
       absl::GetFlag(FLAGS_tls_client_ca)});
  if (!credentials.ok()) {
    absl::FPrintF(stderr, "dikkat-server: %s\n", credentials.status().message());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<BearerTokenAuthenticator>> auth =
      LoadAuthenticator(absl::GetFlag(FLAGS_auth_token_file), std::getenv("DIKKAT_AUTH_TOKEN"));
  if (!auth.ok()) {
    absl::FPrintF(stderr, "dikkat-server: %s\n", auth.status().message());
    return 2;
  }
  const int64_t max_response = absl::GetFlag(FLAGS_max_response_bytes).bytes;
  if (max_response <= 0 || absl::GetFlag(FLAGS_max_message_bytes).bytes <= 0 ||
      absl::GetFlag(FLAGS_openai_max_body_bytes).bytes <= 0) {
    absl::FPrintF(stderr,
                  "dikkat-server: --max_message_bytes, --max_response_bytes and "
                  "--openai_max_body_bytes must be > 0\n");
    return 2;
  }
  const std::string reasoning_parser = absl::GetFlag(FLAGS_openai_reasoning_parser);
  if (!reasoning_parser.empty() && reasoning_parser != "think" &&
      reasoning_parser != "deepseek_r1" && reasoning_parser != "qwen3") {
    absl::FPrintF(stderr,
                  "dikkat-server: --openai_reasoning_parser is '%s'; it must be empty, think, "
                  "deepseek_r1 or qwen3\n",
                  reasoning_parser);
    return 2;
  }
  absl::StatusOr<TransportLimits> transport =
      TransportLimitsFromFlags(absl::GetFlag(FLAGS_max_message_bytes).bytes);
  if (!transport.ok()) {
    absl::FPrintF(stderr, "dikkat-server: %s\n", transport.status().message());
    return 2;
  }
  const bool tls = !absl::GetFlag(FLAGS_tls_cert).empty();
  absl::FPrintF(stderr, "dikkat-server: gRPC transport %s; %s\n",
                !tls ? "plaintext"
                     : (absl::GetFlag(FLAGS_tls_client_ca).empty() ? "TLS" : "mutual TLS"),
                *auth == nullptr
                    ? "no caller authentication"
                    : absl::StrCat("bearer-token authentication (", (*auth)->token_count(),
                                   " token(s))"));
  if (*auth != nullptr && !tls) {
    absl::FPrintF(stderr,
                  "dikkat-server: warning: bearer tokens travel in the clear without TLS; use "
                  "--tls_cert/--tls_key unless the network is trusted\n");
  }

  const int threads = SetComputeThreads(absl::GetFlag(FLAGS_threads));
  absl::FPrintF(stderr, "dikkat-server %s: %d compute threads; %s; %s\n", DIKKAT_VERSION,
                threads, DescribeBlas(), DescribeCpuKernels());

  Metrics metrics(DIKKAT_VERSION);
  ModelRegistry registry;
  // /metrics and /healthz (503 until warm-up passes) come up before the slow
  // model loading, so a port clash fails fast and probes see the start-up.
  std::atomic<bool> serving{false};
  MetricsHttpServer http(&metrics, [&serving] { return serving.load(); });
  const std::string metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  if (!metrics_listen.empty()) {
    absl::StatusOr<int> metrics_port = http.Start(metrics_listen);
    if (!metrics_port.ok()) {
      absl::FPrintF(stderr, "dikkat-server: %s\n", metrics_port.status().ToString());
      return 1;
    }
    absl::FPrintF(stderr, "dikkat-server: metrics on http://%s:%d/metrics\n",
                  SplitHostPort(metrics_listen)->first, *metrics_port);
  }
  if (!LoadModels(*specs, OptionsFromFlags(), &metrics, &registry, stop)) {
    registry.ShutdownAll(absl::ZeroDuration());
    return stop.HasBeenNotified() ? 0 : 1;
  }

  ServiceOptions service_options;
  service_options.auth = auth->get();
  service_options.max_response_bytes = max_response;
  service_options.max_text_bytes = absl::GetFlag(FLAGS_max_text_bytes).bytes;
  service_options.max_stream_pending_bytes = absl::GetFlag(FLAGS_max_stream_pending_bytes).bytes;
  service_options.max_pending_bytes = absl::GetFlag(FLAGS_max_pending_output_bytes).bytes;
  DikkatService service(&registry, &metrics, DIKKAT_VERSION, service_options);
  // Our own grpc.health.v1 service: NOT_SERVING from the moment the port
  // opens until the models are warm (gRPC's default one starts SERVING).
  HealthService health({kServiceName});
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string listen = absl::GetFlag(FLAGS_listen);
  int port = 0;
  builder.AddListeningPort(listen, *credentials, &port);
  builder.RegisterService(&service);
  builder.RegisterService(&health);
  // gRPC enables SO_REUSEPORT by default: a second server on the same port
  // would start "fine" and take half the connections. Fail loudly instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  const int64_t max_message = absl::GetFlag(FLAGS_max_message_bytes).bytes;
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<int64_t>(max_message, INT32_MAX)));
  // The service refuses oversized answers with a clear error first; this is
  // the transport's backstop.
  builder.SetMaxSendMessageSize(static_cast<int>(std::min<int64_t>(max_response, INT32_MAX)));
  SetConnectionLimits(*transport, &builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    absl::FPrintF(stderr, "dikkat-server: cannot listen on %s\n", listen);
    registry.ShutdownAll(absl::ZeroDuration());
    return 1;
  }

  // The OpenAI-compatible port: 503 until the models are warm, like health.
  OpenAiHttpOptions openai_options;
  openai_options.max_workers = std::max(1, absl::GetFlag(FLAGS_openai_max_connections));
  openai_options.max_waiting = openai_options.max_workers;
  // No request on either port takes more than --max_message_bytes.
  openai_options.max_body_bytes = std::min(absl::GetFlag(FLAGS_openai_max_body_bytes).bytes,
                                           absl::GetFlag(FLAGS_max_message_bytes).bytes);
  openai_options.max_text_bytes = service_options.max_text_bytes;
  openai_options.max_response_bytes = max_response;
  openai_options.max_stream_pending_bytes = service_options.max_stream_pending_bytes;
  openai_options.parse_reasoning = !reasoning_parser.empty();
  OpenAiHttpServer openai(&registry, auth->get(), &metrics, [&serving] { return serving.load(); },
                          openai_options);
  const std::string openai_listen = absl::GetFlag(FLAGS_openai_listen);
  if (!openai_listen.empty()) {
    absl::StatusOr<int> openai_port = openai.Start(openai_listen);
    if (!openai_port.ok()) {
      absl::FPrintF(stderr, "dikkat-server: %s\n", openai_port.status().ToString());
      registry.ShutdownAll(absl::ZeroDuration());
      health.Shutdown();
      server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      return 1;
    }
    const std::string openai_host = SplitHostPort(openai_listen)->first;
    absl::FPrintF(stderr, "dikkat-server: openai on http://%s:%d/v1\n",
                  absl::StrContains(openai_host, ':') ? absl::StrCat("[", openai_host, "]")
                                                      : openai_host,
                  *openai_port);
  }

  const std::string host = SplitHostPort(listen).ok() ? SplitHostPort(listen)->first : listen;
  absl::PrintF("listening on %s:%d\n", absl::StrContains(host, ':') ? absl::StrCat("[", host, "]")
                                                                    : host,
               port);
  std::fflush(stdout);

  for (const ModelRegistry::Entry& e : registry.entries()) {
    const absl::Time start = absl::Now();
    // Warm-up tokens are not callers' tokens: keep them out of the counters.
    metrics.SetWarmingUp(e.name, true);
    absl::Status warm = e.engine->Warmup();
    metrics.SetWarmingUp(e.name, false);
    if (!warm.ok()) {
      absl::FPrintF(stderr, "dikkat-server: warm-up of '%s' failed: %s\n", e.name, warm.ToString());
      registry.ShutdownAll(absl::ZeroDuration());
      health.Shutdown();
      server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      return 1;
    }
    absl::FPrintF(stderr, "dikkat-server: warmed up '%s' in %.2fs\n", e.name,
                  absl::ToDoubleSeconds(absl::Now() - start));
  }
  health.SetServing(true);
  serving = true;
  absl::FPrintF(stderr, "dikkat-server: serving %d model(s); default '%s'\n",
                static_cast<int>(registry.size()), registry.default_name());

  stop.WaitForNotification();
  const absl::Duration grace = absl::GetFlag(FLAGS_grace_period);
  absl::FPrintF(stderr, "dikkat-server: %s, draining for up to %s\n",
                g_received_signal == SIGINT ? "SIGINT" : "SIGTERM", absl::FormatDuration(grace));
  // The engines refuse new work (UNAVAILABLE) first, so that nothing is
  // accepted once health says NOT_SERVING (a caller that saw NOT_SERVING and
  // called at once used to slip in while the engines' shutdown threads
  // started); then health, so load balancers stop routing here; then the
  // engines finish what runs; then the transport closes.
  registry.StopAcceptingAll();
  health.SetServing(false);
  serving = false;
  registry.ShutdownAll(grace);
  // gRPC 1.51 ends a call that arrives once Server::Shutdown has begun with
  // CANCELLED, not UNAVAILABLE (grpc/grpc#41785, open upstream), and callers
  // retry only UNAVAILABLE: a client that sent its next call just as the last
  // streams finished saw CANCELLED (tests/soak, drain under load). So the
  // transport stays up, every call refused with UNAVAILABLE by the engines,
  // until no call has arrived for 100 ms (at most 1 s): callers that stop or
  // move to another replica on UNAVAILABLE are gone before the transport
  // closes. One that keeps sending past that second can still meet the race.
  LingerUntilCallersStop(service, absl::Milliseconds(100), absl::Seconds(1));
  // Watch streams end here rather than hold the transport's shutdown up.
  health.Shutdown();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  openai.Stop();
  http.Stop();
  absl::FPrintF(stderr, "dikkat-server: stopped\n");
  return 0;
}

}  // namespace
}  // namespace dikkat::server

int main(int argc, char** argv) {
  dikkat::server::SelectBlasKernels(argc, argv);  // may re-exec this process
  dikkat::server::TuneAllocator();
  return dikkat::server::Run(argc, argv);
}
