// The security options of the real dikkat-server binary, driven through the
// client library: TLS and mutual TLS with certificates made by the openssl
// command at test time, bearer tokens (file and environment), health open
// without a token, and the request / response / batch / attention limits
// with their errors. Every server runs the tiny-lm model built by
// tools/make_tiny_model.py (target tiny_models) on 127.0.0.1:0.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dikkat {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kServer[] = DIKKAT_BINARY_DIR "/server/dikkat-server";
constexpr char kModel[] = DIKKAT_BINARY_DIR "/models/tiny-lm";
constexpr char kToken[] = "s3cret-token-0123456789";
constexpr char kEnvToken[] = "env-token-abcdefghijklmnop";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A dikkat-server child process; stopped with SIGTERM when destroyed.
class ServerProcess {
 public:
  // Starts the server and waits until it prints its address (then health
  // tells when it serves). `env` entries are NAME=VALUE.
  ServerProcess(const std::string& dir, std::vector<std::string> flags,
                std::vector<std::string> env = {})
      : out_(dir + "/server.out." + std::to_string(counter_)),
        err_(dir + "/server.err." + std::to_string(counter_)) {
    ++counter_;
    std::vector<std::string> args = {kServer, absl::StrCat("--model=", kModel),
                                     "--listen=127.0.0.1:0", "--metrics_listen=", "--threads=1",
                                     "--grace_period=1s"};
    args.insert(args.end(), flags.begin(), flags.end());
    // Everything the child needs is prepared before fork(): the test process
    // has gRPC threads, so the child may only make async-signal-safe calls.
    for (char** e = environ; *e != nullptr; ++e) {
      if (!absl::StartsWith(*e, "DIKKAT_AUTH_TOKEN=")) env.emplace_back(*e);
    }
    std::vector<char*> argv, envp;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      const int out = open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err = open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1);
      dup2(err, 2);
      execve(kServer, argv.data(), envp.data());
      _exit(127);
    }
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (absl::Now() < deadline) {
      for (absl::string_view line : absl::StrSplit(ReadFile(out_), '\n')) {
        if (absl::ConsumePrefix(&line, "listening on ")) {
          address_ = std::string(line);
          return;
        }
      }
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        pid_ = -1;
        return;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
  ~ServerProcess() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
  }

  const std::string& address() const { return address_; }
  // Set when the server exited before listening.
  int exit_code() const { return exit_code_; }
  std::string log() const { return ReadFile(err_); }

 private:
  static inline int counter_ = 0;
  std::string out_, err_;
  pid_t pid_ = -1;
  std::string address_;
  int exit_code_ = -1;
};

class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/dikkat_security_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = new std::string(pattern);
    const std::string d = *dir_;
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    // A CA; a server certificate for 127.0.0.1; a client certificate it
    // signed; and a client certificate of another CA.
    const std::string script = absl::StrCat(
        "set -e; cd ", d, "\n",
        "openssl req -x509 ", key, " -keyout ca.key -out ca.pem -days 2 -subj /CN=test-ca\n",
        "openssl req -x509 ", key, " -keyout other.key -out other.pem -days 2 -subj /CN=other\n",
        "openssl req ", key, " -keyout server.key -out server.csr -subj /CN=localhost\n",
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > server.ext\n",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial ",
        "-out server.pem -days 2 -extfile server.ext\n",
        "printf 'extendedKeyUsage=clientAuth\\n' > client.ext\n",
        "openssl req ", key, " -keyout client.key -out client.csr -subj /CN=client\n",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial ",
        "-out client.pem -days 2 -extfile client.ext\n",
        "openssl req ", key, " -keyout rogue.key -out rogue.csr -subj /CN=rogue\n",
        "openssl x509 -req -in rogue.csr -CA other.pem -CAkey other.key -CAcreateserial ",
        "-out rogue.pem -days 2 -extfile client.ext\n");
    std::ofstream(d + "/make.sh") << script;
    ASSERT_EQ(std::system(absl::StrCat("sh ", d, "/make.sh >", d, "/openssl.log 2>&1").c_str()), 0)
        << ReadFile(d + "/openssl.log");
    std::ofstream(d + "/tokens") << "# rotation: both are accepted\n"
                                 << "old-token-000000000000\n  " << kToken << "  \n";
  }
  static void TearDownTestSuite() {
    if (dir_ == nullptr) return;
    std::system(absl::StrCat("rm -rf ", *dir_).c_str());
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(access(kServer, X_OK), 0) << kServer << " is not built (target dikkat-server)";
    ASSERT_EQ(access((std::string(kModel) + "/dikkat.json").c_str(), R_OK), 0)
        << kModel << " is not built (target tiny_models)";
  }

  static std::string File(const std::string& name) { return *dir_ + "/" + name; }

  static client::ClientOptions Options(const ServerProcess& server) {
    client::ClientOptions o;
    o.targets = {server.address()};
    o.retry.max_attempts = 1;
    o.default_timeout = absl::Seconds(20);
    return o;
  }
  static client::TlsOptions Tls(const std::string& cert = "", const std::string& key = "") {
    client::TlsOptions tls;
    tls.enabled = true;
    tls.root_certs_pem = ReadFile(File("ca.pem"));
    tls.server_name_override = "localhost";
    if (!cert.empty()) {
      tls.client_cert_pem = ReadFile(File(cert));
      tls.client_key_pem = ReadFile(File(key));
    }
    return tls;
  }

  // Waits for SERVING (warm-up done), then runs a short greedy Generate.
  static absl::Status Generate(const client::ClientOptions& options) {
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
    if (!c.ok()) return c.status();
    v1::GenerateRequest request;
    request.mutable_input()->set_text("hello");
    request.set_max_new_tokens(3);
    request.mutable_sampling()->set_temperature(0.0f);
    absl::StatusOr<client::GenerateResult> r = (*c)->Generate(request);
    if (!r.ok()) return r.status();
    if (r->token_ids.size() != 3u) return absl::InternalError("expected 3 tokens");
    return absl::OkStatus();
  }

  static absl::StatusOr<client::HealthStatus> Health(const client::ClientOptions& options) {
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
    if (!c.ok()) return c.status();
    return (*c)->HealthCheck();
  }

  // Polls health (which needs no token) until the server has warmed up.
  static void WaitServing(const client::ClientOptions& options) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      absl::StatusOr<client::HealthStatus> h = Health(options);
      if (h.ok() && *h == grpc::health::v1::HealthCheckResponse::SERVING) return;
      absl::SleepFor(absl::Milliseconds(100));
    }
    FAIL() << "the server did not become SERVING";
  }

  static inline std::string* dir_ = nullptr;
};

TEST_F(SecurityTest, TlsServesTlsClientsAndRefusesPlaintext) {
  ServerProcess server(*dir_, {absl::StrCat("--tls_cert=", File("server.pem")),
                               absl::StrCat("--tls_key=", File("server.key"))});
  ASSERT_FALSE(server.address().empty()) << server.log();
  EXPECT_THAT(server.log(), HasSubstr("gRPC transport TLS"));
  client::ClientOptions tls = Options(server);
  tls.tls = Tls();
  WaitServing(tls);
  EXPECT_TRUE(Generate(tls).ok()) << Generate(tls);

  client::ClientOptions plain = Options(server);
  plain.default_timeout = absl::Seconds(3);
  absl::Status s = Generate(plain);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;

  // A client that trusts another CA refuses the server.
  client::ClientOptions wrong_root = tls;
  wrong_root.tls.root_certs_pem = ReadFile(File("other.pem"));
  wrong_root.default_timeout = absl::Seconds(3);
  EXPECT_EQ(Generate(wrong_root).code(), absl::StatusCode::kUnavailable);
}

TEST_F(SecurityTest, MutualTlsNeedsAClientCertificateFromTheCa) {
  ServerProcess server(*dir_, {absl::StrCat("--tls_cert=", File("server.pem")),
                               absl::StrCat("--tls_key=", File("server.key")),
                               absl::StrCat("--tls_client_ca=", File("ca.pem"))});
  ASSERT_FALSE(server.address().empty()) << server.log();
  EXPECT_THAT(server.log(), HasSubstr("gRPC transport mutual TLS"));
  client::ClientOptions good = Options(server);
  good.tls = Tls("client.pem", "client.key");
  WaitServing(good);
  EXPECT_TRUE(Generate(good).ok()) << Generate(good);

  client::ClientOptions no_cert = Options(server);
  no_cert.tls = Tls();
  no_cert.default_timeout = absl::Seconds(3);
  absl::Status s = Generate(no_cert);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;

  client::ClientOptions rogue = Options(server);
  rogue.tls = Tls("rogue.pem", "rogue.key");
  rogue.default_timeout = absl::Seconds(3);
  s = Generate(rogue);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
}

TEST_F(SecurityTest, BearerTokenFromFileGuardsEveryRpcButHealth) {
  ServerProcess server(*dir_, {absl::StrCat("--auth_token_file=", File("tokens"))});
  ASSERT_FALSE(server.address().empty()) << server.log();
  EXPECT_THAT(server.log(), HasSubstr("bearer-token authentication (2 token(s))"));
  client::ClientOptions anonymous = Options(server);
  WaitServing(anonymous);  // health needs no token

  absl::Status s = Generate(anonymous);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("authorization: Bearer"));

  client::ClientOptions wrong = Options(server);
  wrong.bearer_token = "s3cret-token-0123456788";  // one character off
  s = Generate(wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("not valid"));
  EXPECT_THAT(std::string(s.message()), ::testing::Not(HasSubstr(kToken)));

  client::ClientOptions good = Options(server);
  good.bearer_token = kToken;
  EXPECT_TRUE(Generate(good).ok()) << Generate(good);
  good.bearer_token = "old-token-000000000000";
  EXPECT_TRUE(Generate(good).ok()) << Generate(good);

  // The unary RPCs are guarded too.
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(anonymous);
  ASSERT_TRUE(c.ok());
  v1::TokenizeRequest tokenize;
  tokenize.set_text("abc");
  EXPECT_EQ((*c)->Tokenize(tokenize).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ((*c)->GetModelInfo(v1::GetModelInfoRequest()).status().code(),
            absl::StatusCode::kUnauthenticated);
  v1::EncodeRequest encode;
  encode.add_inputs()->set_text("abc");
  EXPECT_EQ((*c)->Encode(encode).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(SecurityTest, BearerTokenFromTheEnvironmentOverTls) {
  ServerProcess server(*dir_,
                       {absl::StrCat("--tls_cert=", File("server.pem")),
                        absl::StrCat("--tls_key=", File("server.key"))},
                       {absl::StrCat("DIKKAT_AUTH_TOKEN=", kEnvToken)});
  ASSERT_FALSE(server.address().empty()) << server.log();
  client::ClientOptions options = Options(server);
  options.tls = Tls();
  WaitServing(options);
  EXPECT_EQ(Generate(options).code(), absl::StatusCode::kUnauthenticated);
  options.bearer_token = kEnvToken;
  EXPECT_TRUE(Generate(options).ok()) << Generate(options);
}

TEST_F(SecurityTest, BadSecurityFlagsStopTheServerAtStart) {
  {
    ServerProcess server(*dir_, {absl::StrCat("--tls_cert=", File("server.pem"))});
    EXPECT_EQ(server.exit_code(), 2);
    EXPECT_THAT(server.log(), HasSubstr("--tls_key"));
  }
  {
    ServerProcess server(*dir_, {absl::StrCat("--tls_cert=", File("server.pem")),
                                 absl::StrCat("--tls_key=", File("missing.key"))});
    EXPECT_EQ(server.exit_code(), 2);
    EXPECT_THAT(server.log(), HasSubstr("missing.key"));
  }
  {
    ServerProcess server(*dir_, {}, {"DIKKAT_AUTH_TOKEN=short"});
    EXPECT_EQ(server.exit_code(), 2);
    EXPECT_THAT(server.log(), HasSubstr("at least 16"));
  }
  {
    ServerProcess server(*dir_, {absl::StrCat("--auth_token_file=", File("tokens"))},
                         {absl::StrCat("DIKKAT_AUTH_TOKEN=", kEnvToken)});
    EXPECT_EQ(server.exit_code(), 2);
    EXPECT_THAT(server.log(), HasSubstr("use one"));
  }
}

TEST_F(SecurityTest, SizeAndCountLimitsAreEnforcedWithClearErrors) {
  ServerProcess server(*dir_, {"--max_message_bytes=4KiB", "--max_response_bytes=16KiB",
                               "--max_batch_entries=2", "--max_attention_values=1000"});
  ASSERT_FALSE(server.address().empty()) << server.log();
  client::ClientOptions options = Options(server);
  WaitServing(options);
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
  ASSERT_TRUE(c.ok());

  // Request size: refused by the transport before it is parsed.
  v1::TokenizeRequest big;
  big.set_text(std::string(8000, 'x'));
  absl::Status s = (*c)->Tokenize(big).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("larger than max"));

  // Response size of the inline RPCs: 3000 ids plus their token texts fit
  // in 16 KiB but not in 2 KiB.
  v1::TokenizeRequest tokenize;
  tokenize.set_text(std::string(3000, 'x'));
  absl::StatusOr<v1::TokenizeResponse> tokens = (*c)->Tokenize(tokenize);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->ids_size(), 3000);
  ServerProcess small(*dir_, {"--max_response_bytes=2KiB"});
  ASSERT_FALSE(small.address().empty()) << small.log();
  client::ClientOptions small_options = Options(small);
  WaitServing(small_options);
  absl::StatusOr<std::unique_ptr<client::Client>> small_client =
      client::Client::Create(small_options);
  ASSERT_TRUE(small_client.ok());
  s = (*small_client)->Tokenize(tokenize).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("the Tokenize response"), HasSubstr("--max_response_bytes")));

  // Batch entries.
  v1::EncodeRequest encode;
  for (int i = 0; i < 3; ++i) encode.add_inputs()->set_text("abc");
  s = (*c)->Encode(encode).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("--max_batch_entries"));
  encode.mutable_inputs()->RemoveLast();
  EXPECT_TRUE((*c)->Encode(encode).ok());

  // Response size: 2 inputs x 100 tokens x 64 floats of hidden states = 51 KB.
  encode.Clear();
  for (int i = 0; i < 2; ++i) encode.add_inputs()->set_text(std::string(100, 'y'));
  encode.set_return_hidden_states(true);
  s = (*c)->Encode(encode).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("--max_response_bytes"));
  encode.set_return_hidden_states(false);
  EXPECT_TRUE((*c)->Encode(encode).ok());

  // Attention payload: 2 layers x 4 heads x 15 x 15 = 1800 values > 1000.
  v1::AttentionRequest attention;
  attention.mutable_input()->set_text(std::string(15, 'z'));
  attention.mutable_input()->set_add_special_tokens(false);
  s = (*c)->Attention(attention).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("the limit is 1000"));
  attention.add_layers(0);
  attention.set_aggregation(v1::HEAD_AGGREGATION_MEAN);  // 225 values (the layer: 900)
  absl::StatusOr<v1::AttentionResponse> ok = (*c)->Attention(attention);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->maps_size(), 1);
}

}  // namespace
}  // namespace dikkat
