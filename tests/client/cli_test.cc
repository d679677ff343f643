// The `dikkat` command-line tool, run as a process against the in-process
// fake server (tests/client/fake_dikkat_server.h): output and exit codes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "fake_dikkat_server.h"
#include "grpcpp/health_check_service_interface.h"

namespace dikkat::client {
namespace {

using ::dikkat::testing::FakeDikkatServer;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/dikkat_cli_test_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::system(absl::StrCat("rm -rf ", dir_).c_str()); }

  // Runs `dikkat --target=<fake> ARGS` (ARGS is shell syntax).
  CliRun Dikkat(const std::string& args, const std::string& target = "") {
    const std::string command =
        absl::StrCat(DIKKAT_BINARY_DIR, "/client/dikkat --target=",
                     target.empty() ? server_.address() : target, " ", args, " >", dir_,
                     "/out 2>", dir_, "/err </dev/null");
    CliRun run;
    const int status = std::system(command.c_str());
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    run.out = ReadFile(dir_ + "/out");
    run.err = ReadFile(dir_ + "/err");
    return run;
  }

  FakeDikkatServer server_;
  std::string dir_;
};

TEST_F(CliTest, HealthExitCodeIsZeroOnlyWhenServing) {
  CliRun run = Dikkat("health");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "SERVING\n");

  server_.server()->GetHealthCheckService()->SetServingStatus(false);
  run = Dikkat("health");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.out, "NOT_SERVING\n");

  run = Dikkat("health --attempts=1 --timeout=5", "127.0.0.1:1");  // nothing listens
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, StartsWith("error: UNAVAILABLE: "));
}

TEST_F(CliTest, GenerateStreamsTextToStdoutAndStatsToStderr) {
  CliRun run = Dikkat("generate --max-tokens=4 --temperature=0 --seed=7 --show-stats hello world");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "t0 t1 t2 t3 \n");
  EXPECT_THAT(run.err, HasSubstr("finish: LENGTH"));
  EXPECT_THAT(run.err, HasSubstr("generated tokens: 4"));
  EXPECT_THAT(run.err, HasSubstr("time to first token"));
  EXPECT_EQ(server_.service().last().method, "Generate");
}

TEST_F(CliTest, LogitBiasGoesOnTheWire) {
  CliRun run = Dikkat("generate --max-tokens=2 --logit-bias=5=-100,7=2.5 --logit-bias '9=1' hi");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const ::dikkat::testing::FakeDikkatService::Seen seen = server_.service().last();
  const auto& bias = seen.generate.sampling().logit_bias();
  ASSERT_EQ(bias.size(), 3u);
  EXPECT_EQ(bias.at(5), -100.0f);
  EXPECT_EQ(bias.at(7), 2.5f);
  EXPECT_EQ(bias.at(9), 1.0f);
  run = Dikkat("generate --logit-bias=5:-100 hi");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--logit-bias=5:-100: expected ID=VALUE pairs"));
}

TEST_F(CliTest, StrictMaxTokensGoesOnTheWire) {
  CliRun run = Dikkat("generate --max-tokens=3 --strict-max-tokens hi");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const ::dikkat::testing::FakeDikkatService::Seen seen = server_.service().last();
  EXPECT_EQ(seen.generate.max_new_tokens(), 3);
  EXPECT_TRUE(seen.generate.strict_max_new_tokens());
  run = Dikkat("generate --strict-max-tokens hi");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.err, HasSubstr("--strict-max-tokens needs --max-tokens"));
}

TEST_F(CliTest, TokenAndModelGoOnTheWire) {
  CliRun run = Dikkat("--token=abc tokenize --model=m1 hi there");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, StartsWith("8 tokens\n"));
  EXPECT_EQ(server_.service().last().authorization, "Bearer abc");
  EXPECT_EQ(server_.service().last().model, "m1");

  run = Dikkat("tokenize --ids-only ab");
  EXPECT_EQ(run.out, "97,98\n");
  run = Dikkat("detokenize 104,105 33");
  EXPECT_EQ(run.out, "hi!\n");
}

TEST_F(CliTest, RpcErrorsPrintCodeAndMessageAndExitOne) {
  CliRun run = Dikkat("tokenize status:5");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err, "error: NOT_FOUND: fake code 5\n");

  run = Dikkat("tokenize status:8");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("error: RESOURCE_EXHAUSTED: fake code 8"));
  EXPECT_THAT(run.err, HasSubstr("retrying after 250ms"));
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Dikkat("generate").exit_code, 2);  // no prompt
  EXPECT_EQ(Dikkat("generate --no-such-flag hi").exit_code, 2);
  EXPECT_EQ(Dikkat("frobnicate").exit_code, 2);
  EXPECT_EQ(Dikkat("attention --kind=sideways abc").exit_code, 2);
  CliRun help = Dikkat("attention --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--svg=FILE"));
  EXPECT_THAT(help.out, HasSubstr("--target=HOST:PORT"));
}

TEST_F(CliTest, EncodePrintsASummaryOrFullJson) {
  CliRun run = Dikkat("encode 'first text'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("[0] \"first text\""));
  EXPECT_THAT(run.out, HasSubstr("dims: [4]  norm: 2.5"));  // |(0.5, -1, 2, 1)| = 2.5
  EXPECT_THAT(run.out, HasSubstr("first 4: [0.5, -1, 2, 1]"));

  run = Dikkat("encode --json --dtype=float16 a b");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json json = nlohmann::json::parse(run.out);
  ASSERT_EQ(json["results"].size(), 2u);
  EXPECT_EQ(json["results"][1]["embedding"]["values"],
            nlohmann::json::array({0.5, -1.0, 2.0, 2.0}));
}

TEST_F(CliTest, AttentionPrintsStrongestLinksAndWritesSvg) {
  const std::string svg = dir_ + "/maps.svg";
  CliRun run = Dikkat(absl::StrCat("attention --top=2 --svg=", svg, " abc"));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("layer 1 head 1\n"));
  // Row 0 attends only to itself: weight 1 is the strongest link.
  EXPECT_THAT(run.out, HasSubstr("[0] \"a\"                      [0] \"a\"                      "
                                 "1.0000"));
  EXPECT_THAT(run.err, HasSubstr("wrote 4 heatmaps"));
  const std::string summary_command = absl::StrCat(
      "/usr/bin/python3 ", DIKKAT_SOURCE_DIR, "/tests/client/svg_summary.py ", svg, " > ", dir_,
      "/summary.json");
  ASSERT_EQ(std::system(summary_command.c_str()), 0);
  const nlohmann::json summary = nlohmann::json::parse(ReadFile(dir_ + "/summary.json"));
  ASSERT_EQ(summary["panels"].size(), 4u);
  EXPECT_EQ(summary["panels"][3]["title"][0], "layer 1 head 1");
  EXPECT_EQ(summary["panels"][3]["cells"], 9);
}

TEST_F(CliTest, InfoPrintsModels) {
  CliRun run = Dikkat("info");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("server version: fake"));
  EXPECT_THAT(run.out, HasSubstr("tiny  (default)"));
  run = Dikkat("info --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out)["models"][0]["vocab_size"], "256");  // int64 as string
}

TEST_F(CliTest, BenchRunsEveryRequestAndReportsPercentiles) {
  CliRun run = Dikkat("bench --concurrency=3 --requests=9 --max-tokens=5 --warmup=1");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("completed: 9 ok, 0 failed"));
  EXPECT_THAT(run.out, HasSubstr("time to first token"));
  EXPECT_THAT(run.out, HasSubstr("inter-token"));
  // The fake server reports 1.25 ms in its stats for every request.
  EXPECT_THAT(run.out, ContainsRegex("of it in the server +1\\.25 +1\\.25 +1\\.25 +1\\.25"));
  EXPECT_THAT(run.out, HasSubstr("tokens per request: 5.0"));
  EXPECT_EQ(server_.service().generate_chunks_written.load(), 10 * 5);
}

TEST_F(CliTest, GenerateExampleRunsItsThreeSteps) {
  const std::string command = absl::StrCat(DIKKAT_BINARY_DIR, "/client/generate_example ",
                                           server_.address(), " Hi >", dir_, "/out 2>&1");
  ASSERT_EQ(std::system(command.c_str()), 0) << ReadFile(dir_ + "/out");
  const std::string out = ReadFile(dir_ + "/out");
  EXPECT_THAT(out, HasSubstr("server fake\n  tiny (default): decoder-only, d_model 4"));
  EXPECT_THAT(out, HasSubstr("Hit0 t1 t2"));
  EXPECT_THAT(out, HasSubstr("[finished: LENGTH]"));
  EXPECT_THAT(out, HasSubstr("embedding: 4 values, norm 2.5, first: 0.5 -1 2 1"));
}

}  // namespace
}  // namespace dikkat::client
