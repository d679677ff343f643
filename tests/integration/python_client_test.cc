// Cross-language use: a Python grpcio client (Debian's python3-grpcio, stubs
// generated at test time from the proto by tests/integration/python_client.py)
// calls the dikkat-server binary, and gets exactly what the C++ client gets:
// the same streamed greedy tokens and text, the same embedding bytes, the
// same error; plus GetModelInfo through server reflection with no stubs.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "client/client.h"
#include "client/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "integration_harness.h"

namespace dikkat::integration {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

TEST(PythonClientTest, GrpcioClientGetsWhatTheCppClientGets) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> p = ServerProcess::Start(
      {"--model=" + ModelDir("tiny-lm"), "--model=s2s=" + ModelDir("tiny-seq2seq"),
       "--listen=127.0.0.1:0", "--metrics_listen=", "--kv_cache_bytes=16MiB", "--threads=1"});
  ASSERT_TRUE(p.ok()) << p.status();
  ServerProcess& server = **p;
  client::ClientOptions options;
  options.targets = {server.grpc_address()};
  absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(WaitFor(
      [&] {
        absl::StatusOr<client::HealthStatus> h = (*c)->HealthCheck();
        return h.ok() && *h == grpc::health::v1::HealthCheckResponse::SERVING;
      },
      absl::Seconds(20)))
      << server.Logs();

  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string command = absl::StrCat(
      "/usr/bin/python3 ", DIKKAT_SOURCE_DIR, "/tests/integration/python_client.py --target ",
      server.grpc_address(), " --proto-root ", DIKKAT_SOURCE_DIR, "/proto --out ", tmp.path(),
      " > ", tmp.path(), "/out.json 2> ", tmp.path(), "/err.txt");
  const int rc = std::system(command.c_str());
  const std::string out = ReadFile(tmp.path() + "/out.json");
  ASSERT_EQ(rc, 0) << command << "\nstderr:\n" << ReadFile(tmp.path() + "/err.txt");
  nlohmann::json py;
  ASSERT_NO_THROW(py = nlohmann::json::parse(out)) << out;

  // Streamed greedy generation: the same tokens and text as the C++ client.
  for (const auto& [key, model, prompt, n] :
       std::vector<std::tuple<std::string, std::string, std::string, int>>{
           {"generate", "", "Hello from Python", 10}, {"generate_s2s", "s2s", "translate me", 6}}) {
    SCOPED_TRACE(key);
    absl::StatusOr<client::GenerateResult> cpp = (*c)->Generate(GreedyRequest(prompt, n, model));
    ASSERT_TRUE(cpp.ok()) << cpp.status();
    const nlohmann::json& g = py.at(key);
    EXPECT_EQ(g.at("ids").get<std::vector<int32_t>>(), cpp->token_ids);
    EXPECT_EQ(g.at("text").get<std::string>(), cpp->text);
    EXPECT_EQ(g.at("finish_reason"), "FINISH_REASON_LENGTH");
    EXPECT_EQ(g.at("generated_tokens"), n);
    EXPECT_GE(g.at("chunks").get<int>(), 1);
  }

  // Encode: byte-identical float32, and bfloat16 that decodes to it.
  v1::EncodeRequest encode;
  *encode.add_inputs() = client::TextInput("embed me");
  encode.set_normalize(true);
  absl::StatusOr<v1::EncodeResponse> cpp = (*c)->Encode(encode);
  ASSERT_TRUE(cpp.ok()) << cpp.status();
  const nlohmann::json& e = py.at("encode");
  EXPECT_EQ(e.at("model"), "tiny-lm");
  EXPECT_EQ(e.at("token_ids").get<std::vector<int32_t>>(),
            std::vector<int32_t>(cpp->results(0).token_ids().begin(),
                                 cpp->results(0).token_ids().end()));
  EXPECT_THAT(e.at("f32_shape").get<std::vector<int64_t>>(), ElementsAre(64));
  EXPECT_EQ(e.at("f32_hex").get<std::string>(), Hex(cpp->results(0).embedding().data()));
  const std::vector<float> f32 = e.at("f32_values").get<std::vector<float>>();
  const std::vector<float> bf16 = e.at("bf16_values").get<std::vector<float>>();
  ASSERT_EQ(f32.size(), 64u);
  ASSERT_EQ(bf16.size(), 64u);
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_NEAR(bf16[i], f32[i], std::abs(f32[i]) / 128 + 1e-7) << "value " << i;
  }

  // Errors carry the same code and field name to Python.
  EXPECT_EQ(py.at("invalid").at("code"), "INVALID_ARGUMENT");
  EXPECT_THAT(py.at("invalid").at("details").get<std::string>(), HasSubstr("temperature"));

  // Server reflection: the service is discoverable and callable without stubs.
  const nlohmann::json& r = py.at("reflection");
  EXPECT_THAT(r.at("services").get<std::vector<std::string>>(),
              ::testing::IsSupersetOf({"dikkat.v1.Dikkat", "grpc.health.v1.Health"}));
  EXPECT_THAT(r.at("files").get<std::vector<std::string>>(),
              ::testing::Contains("dikkat/v1/dikkat.proto"));
  EXPECT_THAT(r.at("models").get<std::vector<std::string>>(), ElementsAre("tiny-lm", "s2s"));
  EXPECT_THAT(r.at("default").get<std::vector<std::string>>(), ElementsAre("tiny-lm"));

  server.Signal(SIGTERM);
  const std::optional<int> exit = server.WaitForExit(absl::Seconds(20));
  EXPECT_TRUE(exit.has_value() && WIFEXITED(*exit) && WEXITSTATUS(*exit) == 0)
      << DescribeWaitStatus(exit) << "\n" << server.Logs();
}

}  // namespace
}  // namespace dikkat::integration
