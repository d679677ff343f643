#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/attention_render.h"
#include "client/cli/commands.h"

namespace dikkat::client::cli {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--", flag, "=", path, ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

void RegisterGlobalFlags(GlobalFlags* g, FlagSet* set) {
  set->Strings("target", &g->targets,
               "server address host:port (or any gRPC target); give several for round-robin "
               "load balancing (default: 127.0.0.1:50051)",
               "HOST:PORT");
  set->String("model", &g->model, "model name; empty = the server's default", "NAME");
  set->Double("timeout", &g->timeout_seconds, "deadline of each call in seconds; 0 = none");
  set->String("token", &g->token,
              "bearer token sent as 'authorization: Bearer TOKEN' (default: $DIKKAT_TOKEN)",
              "TOKEN");
  set->Bool("tls", &g->tls, "connect with TLS");
  set->String("tls-ca", &g->tls_ca_file, "PEM roots to verify the server with (implies --tls)",
              "FILE");
  set->String("tls-cert", &g->tls_cert_file,
              "PEM client certificate chain for mutual TLS (implies --tls; needs --tls-key)",
              "FILE");
  set->String("tls-key", &g->tls_key_file, "PEM client private key for mutual TLS", "FILE");
  set->String("tls-server-name", &g->tls_server_name,
              "expect this name in the server certificate instead of the target host", "NAME");
  set->Int("attempts", &g->attempts,
           "attempts per call when the server is UNAVAILABLE, 1..5 (1 = no retries)");
  set->Bool("wait-for-ready", &g->wait_for_ready,
            "wait (up to --timeout) for the server to come up instead of failing at once");
  set->Int("max-message-mb", &g->max_message_mb, "largest message sent or received, in MiB");
}

absl::StatusOr<std::unique_ptr<Client>> MakeClient(const GlobalFlags& g) {
  ClientOptions options;
  if (!g.targets.empty()) options.targets = g.targets;
  options.default_model = g.model;
  if (g.timeout_seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout=", g.timeout_seconds, ": must be >= 0 (0 = no deadline)"));
  }
  options.default_timeout = g.timeout_seconds == 0 ? absl::InfiniteDuration()
                                                   : absl::Seconds(g.timeout_seconds);
  options.bearer_token = g.token;
  if (options.bearer_token.empty()) {
    if (const char* env = std::getenv("DIKKAT_TOKEN")) options.bearer_token = env;
  }
  options.retry.max_attempts = g.attempts;
  options.wait_for_ready = g.wait_for_ready;
  if (g.max_message_mb <= 0 || g.max_message_mb > 2047) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-message-mb=", g.max_message_mb, ": allowed 1..2047"));
  }
  options.max_message_bytes = g.max_message_mb << 20;
  TlsOptions& tls = options.tls;
  tls.enabled = g.tls || !g.tls_ca_file.empty() || !g.tls_cert_file.empty() ||
                !g.tls_key_file.empty() || !g.tls_server_name.empty();
  if (!g.tls_ca_file.empty()) {
    absl::StatusOr<std::string> pem = ReadFile("tls-ca", g.tls_ca_file);
    if (!pem.ok()) return pem.status();
    tls.root_certs_pem = *std::move(pem);
  }
  if (!g.tls_cert_file.empty()) {
    absl::StatusOr<std::string> pem = ReadFile("tls-cert", g.tls_cert_file);
    if (!pem.ok()) return pem.status();
    tls.client_cert_pem = *std::move(pem);
  }
  if (!g.tls_key_file.empty()) {
    absl::StatusOr<std::string> pem = ReadFile("tls-key", g.tls_key_file);
    if (!pem.ok()) return pem.status();
    tls.client_key_pem = *std::move(pem);
  }
  tls.server_name_override = g.tls_server_name;
  return Client::Create(std::move(options));
}

int ReportError(const absl::Status& status, const CommandContext& context) {
  if (status.code() == absl::StatusCode::kCancelled && context.interrupt &&
      context.interrupt->cancelled()) {
    std::cerr << "\ninterrupted\n";
    return kExitInterrupted;
  }
  std::cerr << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message()
            << "\n";
  if (std::optional<absl::Duration> retry = RetryAfter(status)) {
    std::cerr << "the server suggests retrying after " << absl::FormatDuration(*retry) << "\n";
  }
  return kExitFailure;
}

int UsageError(const std::string& command, const std::string& message) {
  std::cerr << "dikkat " << command << ": " << message << "\n"
            << "run 'dikkat " << command << " --help' for usage\n";
  return kExitUsage;
}

std::string JoinedText(const std::vector<std::string>& args) {
  if (args.size() == 1 && args[0] == "-") {
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  return absl::StrJoin(args, " ");
}

absl::StatusOr<v1::DType> ParseDType(const std::string& name) {
  if (name == "float32") return v1::DTYPE_FLOAT32;
  if (name == "bfloat16") return v1::DTYPE_BFLOAT16;
  if (name == "float16") return v1::DTYPE_FLOAT16;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype=", name, ": allowed float32, bfloat16, float16"));
}

std::string Quoted(const std::string& token) {
  return absl::StrCat("\"", PrintableToken(token), "\"");
}

}  // namespace dikkat::client::cli
