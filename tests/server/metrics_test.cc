// Metrics (server/metrics.h) and the /metrics + /healthz endpoint: the
// scraped text has the documented names, types and labels, and counters and
// histograms move when events are recorded.
#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fake_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/cpu_isa.h"
#include "server/metrics_http.h"

namespace dikkat::server {
namespace {

using ::testing::HasSubstr;

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the Prometheus text format (exposition 0.0.4) into samples and
// "# TYPE" declarations.
struct Scrape {
  std::vector<Sample> samples;
  std::map<std::string, std::string> types;

  explicit Scrape(const std::string& text) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("# TYPE ", 0) == 0) {
        std::istringstream t(line.substr(7));
        std::string name, type;
        t >> name >> type;
        types[name] = type;
        continue;
      }
      if (line.empty() || line[0] == '#') continue;
      Sample s;
      size_t pos = line.find_first_of("{ ");
      s.name = line.substr(0, pos);
      if (line[pos] == '{') {
        const size_t end = line.find('}', pos);
        std::string body = line.substr(pos + 1, end - pos - 1);
        size_t i = 0;
        while (i < body.size()) {
          const size_t eq = body.find('=', i);
          const size_t q2 = body.find('"', eq + 2);
          s.labels[body.substr(i, eq - i)] = body.substr(eq + 2, q2 - eq - 2);
          i = q2 + 1;
          if (i < body.size() && body[i] == ',') ++i;
        }
        pos = end + 1;
      }
      s.value = std::stod(line.substr(pos + 1));
      samples.push_back(std::move(s));
    }
  }

  // The value of the one sample with this name whose labels include `labels`;
  // -1 if none.
  double Value(const std::string& name, const std::map<std::string, std::string>& labels) const {
    for (const Sample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : labels) {
        auto it = s.labels.find(k);
        if (it == s.labels.end() || it->second != v) match = false;
      }
      if (match) return s.value;
    }
    return -1;
  }
};

TEST(MetricsTest, FamiliesHaveConventionalNamesAndTypes) {
  Metrics metrics("9.9.9");
  metrics.AddModel("tiny");
  testing::FakeEngine engine("tiny", model::Architecture::kDecoderOnly);
  metrics.SetModelLoaded("tiny", engine.description(), &engine);  // dikkat_model_info appears
  Scrape scrape(metrics.Scrape());
  const std::map<std::string, std::string> expected = {
      {"dikkat_requests_total", "counter"},
      {"dikkat_request_failures_total", "counter"},
      {"dikkat_request_duration_seconds", "histogram"},
      {"dikkat_queue_time_seconds", "histogram"},
      {"dikkat_time_to_first_token_seconds", "histogram"},
      {"dikkat_inter_token_latency_seconds", "histogram"},
      {"dikkat_step_duration_seconds", "histogram"},
      {"dikkat_step_batch_size", "histogram"},
      {"dikkat_prompt_tokens_total", "counter"},
      {"dikkat_generated_tokens_total", "counter"},
      {"dikkat_request_prompt_tokens", "histogram"},
      {"dikkat_request_generated_tokens", "histogram"},
      {"dikkat_requests_running", "gauge"},
      {"dikkat_requests_waiting", "gauge"},
      {"dikkat_kv_cache_usage_ratio", "gauge"},
      {"dikkat_kv_cache_blocks_used", "gauge"},
      {"dikkat_kv_cache_blocks_total", "gauge"},
      {"dikkat_preemptions_total", "counter"},
      {"dikkat_model_load_seconds", "gauge"},
      {"dikkat_model_info", "gauge"},
      {"dikkat_cpu_kernels_info", "gauge"},
      {"process_resident_memory_bytes", "gauge"},
  };
  for (const auto& [name, type] : expected) {
    auto it = scrape.types.find(name);
    ASSERT_NE(it, scrape.types.end()) << name << " missing";
    EXPECT_EQ(it->second, type) << name;
  }
  for (const auto& [name, type] : scrape.types) {
    EXPECT_EQ(name.find(':'), std::string::npos) << name;
    if (type == "counter") {
      EXPECT_THAT(name, ::testing::EndsWith("_total"));
    }
  }
  // Per-phase step series exist from the start, labelled by model.
  EXPECT_EQ(scrape.Value("dikkat_step_duration_seconds_count", {{"model", "tiny"}, {"phase", "decode"}}), 0);
  EXPECT_EQ(scrape.Value("dikkat_step_batch_size_count", {{"model", "tiny"}, {"phase", "prefill"}}), 0);
  // The CPU kernels' ISA as the kernels use it (DIKKAT_ISA in the ISA matrix).
  EXPECT_EQ(scrape.Value("dikkat_cpu_kernels_info",
                         {{"isa", std::string(model::IsaName(model::ActiveIsa()))},
                          {"detected", std::string(model::IsaName(model::DetectedIsa()))}}),
            1);
  // Resident memory is read from /proc and is plausible (> 1 MiB).
  EXPECT_GT(scrape.Value("process_resident_memory_bytes", {}), 1 << 20);
}

TEST(MetricsTest, RpcOutcomesCountByCodeAndReason) {
  Metrics metrics("1");
  metrics.AddModel("tiny");
  metrics.RecordRpc("tiny", Rpc::kGenerate, absl::StatusCode::kOk, absl::Milliseconds(20));
  metrics.RecordRpc("tiny", Rpc::kGenerate, absl::StatusCode::kOk, absl::Milliseconds(40));
  metrics.RecordRpc("tiny", Rpc::kGenerate, absl::StatusCode::kResourceExhausted, absl::Milliseconds(1));
  metrics.RecordRpc("tiny", Rpc::kEncode, absl::StatusCode::kInvalidArgument, absl::Milliseconds(1));
  metrics.RecordRpc("tiny", Rpc::kGenerate, absl::StatusCode::kDeadlineExceeded, absl::Seconds(2));
  metrics.RecordRpc("tiny", Rpc::kAttention, absl::StatusCode::kCancelled, absl::Seconds(1));
  metrics.RecordRpc("tiny", Rpc::kAttention, absl::StatusCode::kInternal, absl::Seconds(1));
  // A request naming a model that is not hosted must not mint a label value.
  metrics.RecordRpc("../../etc/passwd", Rpc::kTokenize, absl::StatusCode::kNotFound, absl::Seconds(0));

  Scrape s(metrics.Scrape());
  EXPECT_EQ(s.Value("dikkat_requests_total", {{"model", "tiny"}, {"rpc", "Generate"}, {"code", "OK"}}), 2);
  EXPECT_EQ(s.Value("dikkat_requests_total",
                    {{"model", "tiny"}, {"rpc", "Generate"}, {"code", "RESOURCE_EXHAUSTED"}}), 1);
  EXPECT_EQ(s.Value("dikkat_requests_total",
                    {{"model", "tiny"}, {"rpc", "Encode"}, {"code", "INVALID_ARGUMENT"}}), 1);
  EXPECT_EQ(s.Value("dikkat_request_failures_total", {{"model", "tiny"}, {"reason", "overloaded"}}), 1);
  EXPECT_EQ(s.Value("dikkat_request_failures_total", {{"model", "tiny"}, {"reason", "invalid"}}), 1);
  EXPECT_EQ(s.Value("dikkat_request_failures_total", {{"model", "tiny"}, {"reason", "deadline"}}), 1);
  EXPECT_EQ(s.Value("dikkat_request_failures_total", {{"model", "tiny"}, {"reason", "cancelled"}}), 1);
  EXPECT_EQ(s.Value("dikkat_request_failures_total", {{"model", "tiny"}, {"reason", "internal"}}), 1);
  EXPECT_EQ(s.Value("dikkat_requests_total", {{"model", "unknown"}, {"rpc", "Tokenize"}}), 1);
  for (const Sample& sample : s.samples) {
    auto it = sample.labels.find("model");
    if (it != sample.labels.end()) {
      EXPECT_NE(it->second, "../../etc/passwd");
    }
  }
  // Latency histogram: 4 Generate calls, 20 ms falls in le=0.025 but 40 ms does not.
  EXPECT_EQ(s.Value("dikkat_request_duration_seconds_count", {{"model", "tiny"}, {"rpc", "Generate"}}), 4);
  EXPECT_EQ(s.Value("dikkat_request_duration_seconds_bucket",
                    {{"model", "tiny"}, {"rpc", "Generate"}, {"le", "0.025"}}), 2);
  EXPECT_NEAR(s.Value("dikkat_request_duration_seconds_sum", {{"model", "tiny"}, {"rpc", "Generate"}}),
              2.061, 1e-9);

  // Counters only go up.
  metrics.RecordRpc("tiny", Rpc::kGenerate, absl::StatusCode::kOk, absl::Milliseconds(20));
  Scrape again(metrics.Scrape());
  EXPECT_EQ(again.Value("dikkat_requests_total",
                        {{"model", "tiny"}, {"rpc", "Generate"}, {"code", "OK"}}), 3);
}

TEST(MetricsTest, EngineListenerEventsAndStatsAppear) {
  Metrics metrics("2.0");
  EngineListener* listener = metrics.AddModel("tiny");
  testing::FakeEngine engine("tiny", model::Architecture::kDecoderOnly);
  EngineStats stats;
  stats.running = 3;
  stats.waiting = 5;
  stats.kv_blocks_total = 40;
  stats.kv_blocks_used = 10;
  engine.set_stats(stats);
  metrics.SetModelLoaded("tiny", engine.description(), &engine);

  listener->OnStep(StepTiming{true, 2, 30, absl::Milliseconds(7)});
  listener->OnStep(StepTiming{false, 4, 4, absl::Milliseconds(3)});
  listener->OnStep(StepTiming{false, 4, 4, absl::Milliseconds(3)});
  GenerateSummary summary;
  summary.prompt_tokens = 12;
  summary.generated_tokens = 5;
  summary.queue_time = absl::Milliseconds(2);
  summary.time_to_first_token = absl::Milliseconds(30);
  listener->OnGenerateFinished(summary);
  listener->OnTokenEmitted(absl::Milliseconds(15));
  listener->OnPreemption();
  metrics.AddPromptTokens("tiny", 8);  // an Encode call

  Scrape s(metrics.Scrape());
  EXPECT_EQ(s.Value("dikkat_step_duration_seconds_count", {{"model", "tiny"}, {"phase", "prefill"}}), 1);
  EXPECT_EQ(s.Value("dikkat_step_duration_seconds_count", {{"model", "tiny"}, {"phase", "decode"}}), 2);
  EXPECT_NEAR(s.Value("dikkat_step_batch_size_sum", {{"model", "tiny"}, {"phase", "decode"}}), 8, 1e-9);
  EXPECT_EQ(s.Value("dikkat_prompt_tokens_total", {{"model", "tiny"}}), 20);
  EXPECT_EQ(s.Value("dikkat_generated_tokens_total", {{"model", "tiny"}}), 5);
  EXPECT_EQ(s.Value("dikkat_request_generated_tokens_count", {{"model", "tiny"}}), 1);
  EXPECT_EQ(s.Value("dikkat_time_to_first_token_seconds_bucket", {{"model", "tiny"}, {"le", "0.025"}}), 0);
  EXPECT_EQ(s.Value("dikkat_time_to_first_token_seconds_bucket", {{"model", "tiny"}, {"le", "0.05"}}), 1);
  EXPECT_EQ(s.Value("dikkat_inter_token_latency_seconds_count", {{"model", "tiny"}}), 1);
  EXPECT_EQ(s.Value("dikkat_preemptions_total", {{"model", "tiny"}}), 1);
  EXPECT_EQ(s.Value("dikkat_requests_running", {{"model", "tiny"}}), 3);
  EXPECT_EQ(s.Value("dikkat_requests_waiting", {{"model", "tiny"}}), 5);
  EXPECT_EQ(s.Value("dikkat_kv_cache_blocks_used", {{"model", "tiny"}}), 10);
  EXPECT_EQ(s.Value("dikkat_kv_cache_blocks_total", {{"model", "tiny"}}), 40);
  EXPECT_DOUBLE_EQ(s.Value("dikkat_kv_cache_usage_ratio", {{"model", "tiny"}}), 0.25);
  EXPECT_DOUBLE_EQ(s.Value("dikkat_model_load_seconds", {{"model", "tiny"}}), 0.25);
  EXPECT_EQ(s.Value("dikkat_model_info", {{"model", "tiny"}, {"architecture", "decoder-only"},
                                          {"dtype", "float32"}, {"kv_cache_dtype", "float32"},
                                          {"device", "cpu"},
                                          {"version", "2.0"}}), 1);

  // Gauges follow the engine at scrape time.
  stats.running = 0;
  stats.kv_blocks_used = 0;
  engine.set_stats(stats);
  Scrape later(metrics.Scrape());
  EXPECT_EQ(later.Value("dikkat_requests_running", {{"model", "tiny"}}), 0);
  EXPECT_EQ(later.Value("dikkat_kv_cache_usage_ratio", {{"model", "tiny"}}), 0);
}

TEST(MetricsTest, GenerateFinishReasonsAreCounted) {
  Metrics metrics("1");
  EngineListener* listener = metrics.AddModel("tiny");
  GenerateSummary summary;
  summary.generated_tokens = 3;
  summary.reason = FinishReason::kEos;
  listener->OnGenerateFinished(summary);
  summary.reason = FinishReason::kLength;
  listener->OnGenerateFinished(summary);
  listener->OnGenerateFinished(summary);
  summary.reason = FinishReason::kDeadline;
  listener->OnGenerateFinished(summary);

  Scrape s(metrics.Scrape());
  EXPECT_EQ(s.types["dikkat_generate_finished_total"], "counter");
  EXPECT_EQ(s.Value("dikkat_generate_finished_total", {{"model", "tiny"}, {"finish_reason", "eos"}}), 1);
  EXPECT_EQ(s.Value("dikkat_generate_finished_total", {{"model", "tiny"}, {"finish_reason", "length"}}), 2);
  EXPECT_EQ(s.Value("dikkat_generate_finished_total", {{"model", "tiny"}, {"finish_reason", "deadline"}}), 1);
  // Every reason's series exists from the start.
  EXPECT_EQ(s.Value("dikkat_generate_finished_total", {{"model", "tiny"}, {"finish_reason", "error"}}), 0);
  EXPECT_EQ(s.Value("dikkat_generate_finished_total", {{"model", "tiny"}, {"finish_reason", "stop"}}), 0);
}

TEST(MetricsTest, WarmUpEventsAreNotCounted) {
  Metrics metrics("1");
  EngineListener* listener = metrics.AddModel("tiny");
  GenerateSummary summary;
  summary.prompt_tokens = 2;
  summary.generated_tokens = 2;

  metrics.SetWarmingUp("tiny", true);
  listener->OnStep(StepTiming{true, 1, 2, absl::Milliseconds(5)});
  listener->OnTokenEmitted(absl::Milliseconds(1));
  listener->OnGenerateFinished(summary);
  listener->OnPreemption();
  metrics.SetWarmingUp("tiny", false);

  summary.prompt_tokens = 4;
  summary.generated_tokens = 7;
  listener->OnStep(StepTiming{false, 1, 1, absl::Milliseconds(1)});
  listener->OnGenerateFinished(summary);

  Scrape s(metrics.Scrape());
  EXPECT_EQ(s.Value("dikkat_generated_tokens_total", {{"model", "tiny"}}), 7);
  EXPECT_EQ(s.Value("dikkat_prompt_tokens_total", {{"model", "tiny"}}), 4);
  EXPECT_EQ(s.Value("dikkat_request_generated_tokens_count", {{"model", "tiny"}}), 1);
  EXPECT_EQ(s.Value("dikkat_step_duration_seconds_count", {{"model", "tiny"}, {"phase", "prefill"}}), 0);
  EXPECT_EQ(s.Value("dikkat_step_duration_seconds_count", {{"model", "tiny"}, {"phase", "decode"}}), 1);
  EXPECT_EQ(s.Value("dikkat_inter_token_latency_seconds_count", {{"model", "tiny"}}), 0);
  EXPECT_EQ(s.Value("dikkat_preemptions_total", {{"model", "tiny"}}), 0);
}

TEST(MetricsTest, ProcessCpuAndStartTimeFollowProc) {
  Metrics metrics("1");
  const double before = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  // Burn some CPU so that the counter has something to show (clock ticks are 10 ms).
  volatile double x = 0;
  const absl::Time until = absl::Now() + absl::Milliseconds(60);
  while (absl::Now() < until) x = x + 1;
  Scrape first(metrics.Scrape());
  EXPECT_EQ(first.types["process_cpu_seconds_total"], "counter");
  EXPECT_EQ(first.types["process_start_time_seconds"], "gauge");
  const double cpu = first.Value("process_cpu_seconds_total", {});
  EXPECT_GE(cpu, 0.03);
  // The test process started within the last hour, and not after this test began.
  const double start = first.Value("process_start_time_seconds", {});
  EXPECT_LE(start, before + 1);
  EXPECT_GT(start, before - 3600);

  const absl::Time later = absl::Now() + absl::Milliseconds(60);
  while (absl::Now() < later) x = x + 1;
  Scrape second(metrics.Scrape());
  EXPECT_GT(second.Value("process_cpu_seconds_total", {}), cpu);
}

// A minimal HTTP/1.0 GET over a loopback socket.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return "";
  }
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
  close(fd);
  return response;
}

TEST(MetricsHttpServerTest, ServesMetricsAndHealth) {
  Metrics metrics("1");
  metrics.AddModel("tiny");
  metrics.RecordRpc("tiny", Rpc::kEncode, absl::StatusCode::kOk, absl::Milliseconds(1));
  std::atomic<bool> healthy{false};
  MetricsHttpServer http(&metrics, [&healthy] { return healthy.load(); });
  absl::StatusOr<int> port = http.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_GT(*port, 0);

  const std::string scrape = HttpGet(*port, "/metrics");
  EXPECT_THAT(scrape, HasSubstr("200 OK"));
  EXPECT_THAT(scrape, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(scrape, HasSubstr("dikkat_requests_total{code=\"OK\",model=\"tiny\",rpc=\"Encode\"} 1"));

  EXPECT_THAT(HttpGet(*port, "/healthz"), HasSubstr("503"));
  healthy = true;
  EXPECT_THAT(HttpGet(*port, "/healthz"), HasSubstr("200 OK"));
  EXPECT_THAT(HttpGet(*port, "/nope"), HasSubstr("404"));

  // A second server cannot take the same port.
  MetricsHttpServer clash(&metrics, nullptr);
  EXPECT_EQ(clash.Start("127.0.0.1:" + std::to_string(*port)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(clash.Start("no-port").status().code(), absl::StatusCode::kInvalidArgument);

  http.Stop();
  EXPECT_TRUE(HttpGet(*port, "/metrics").empty()) << "still serving after Stop()";
}

}  // namespace
}  // namespace dikkat::server
