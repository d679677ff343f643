// Shared helpers of the integration tests: a real in-process dikkat server
// (DikkatService over real Engines on the build-time tiny models, on
// 127.0.0.1:0), the dikkat-server binary as a child process, a minimal HTTP
// GET for /metrics and /healthz, and bounded polling.
//
// Header-only because the test CMake glob builds one executable per
// *_test.cc. Nothing here is thread-safe unless a comment says so.
#ifndef DIKKAT_TESTS_INTEGRATION_INTEGRATION_HARNESS_H_
#define DIKKAT_TESTS_INTEGRATION_INTEGRATION_HARNESS_H_

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/sync.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "server/engine.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/service.h"

extern char** environ;

namespace dikkat::integration {

inline std::string ModelDir(const std::string& name) {
  return std::string(DIKKAT_BINARY_DIR) + "/models/" + name;
}
inline std::string ServerBinary() { return std::string(DIKKAT_BINARY_DIR) + "/server/dikkat-server"; }

// Polls `done` every 5 ms until it holds or `timeout` passes. No fixed
// sleeps in the tests: they wait for a condition, bounded.
inline bool WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    if (done()) return true;
    if (absl::Now() >= end) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

// A mkdtemp directory removed (with its files, no subdirectories) on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/dikkat-integ-XXXXXX";
    if (mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---- engine listener ---------------------------------------------------------

// Counts what an engine reports: tokens emitted, the largest batch, and how
// each Generate ended. Called on the engine thread, read from the test
// thread: thread-safe.
//
// With a `step_delay` it also sleeps that long after every engine step: the
// tiny models decode a token in tens of microseconds, faster than a cancel
// crosses the wire, so tests of cancellation and deadlines slow the engine
// down to stand in for a real model. (Real listeners must never block.)
class RecordingListener : public server::EngineListener {
 public:
  explicit RecordingListener(absl::Duration step_delay = absl::ZeroDuration())
      : step_delay_(step_delay) {}

  void OnStep(const server::StepTiming& step) override {
    {
      dikkat::MutexLock lock(&mu_);
      max_batch_ = std::max(max_batch_, step.sequences);
    }
    if (step_delay_ > absl::ZeroDuration()) absl::SleepFor(step_delay_);
  }
  void OnGenerateFinished(const server::GenerateSummary& summary) override {
    dikkat::MutexLock lock(&mu_);
    finished_.push_back(summary);
  }
  void OnTokenEmitted(absl::Duration) override {
    dikkat::MutexLock lock(&mu_);
    ++tokens_;
  }
  std::vector<server::GenerateSummary> finished() const {
    dikkat::MutexLock lock(&mu_);
    return finished_;
  }
  int64_t tokens() const {
    dikkat::MutexLock lock(&mu_);
    return tokens_;
  }
  int32_t max_batch() const {
    dikkat::MutexLock lock(&mu_);
    return max_batch_;
  }

 private:
  const absl::Duration step_delay_;
  mutable dikkat::Mutex mu_;
  std::vector<server::GenerateSummary> finished_ ABSL_GUARDED_BY(mu_);
  int64_t tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t max_batch_ ABSL_GUARDED_BY(mu_) = 0;
};

// ---- in-process server ---------------------------------------------------------

// Engine options small enough for quick start-up on the tiny models.
inline server::EngineOptions SmallEngineOptions() {
  server::EngineOptions o;
  o.kv_cache_bytes = 16ll << 20;
  o.max_new_tokens_cap = 512;
  o.default_max_new_tokens = 16;
  return o;
}

// DikkatService over real engines, listening on 127.0.0.1:<free port>.
// Owns the engines, the gRPC server and a RecordingListener per model.
class InProcessServer {
 public:
  struct Model {
    std::string name;
    std::string dir;  // model folder
    server::EngineOptions options = SmallEngineOptions();
    absl::Duration step_delay = absl::ZeroDuration();  // see RecordingListener
  };

  static absl::StatusOr<std::unique_ptr<InProcessServer>> Start(const std::vector<Model>& models) {
    std::unique_ptr<InProcessServer> s(new InProcessServer());
    for (const Model& m : models) {
      auto listener = std::make_unique<RecordingListener>(m.step_delay);
      absl::StatusOr<std::unique_ptr<server::Engine>> engine =
          server::Engine::Create(m.name, m.dir, m.options, listener.get());
      if (!engine.ok()) return engine.status();
      if (absl::Status warm = (*engine)->Warmup(); !warm.ok()) return warm;
      s->listeners_.emplace_back(m.name, std::move(listener));
      if (absl::Status added = s->registry_.Add(m.name, std::move(*engine)); !added.ok()) {
        return added;
      }
    }
    s->service_ = std::make_unique<server::DikkatService>(&s->registry_, nullptr, "integration");
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(s->service_.get());
    builder.SetMaxSendMessageSize(64 << 20);
    s->server_ = builder.BuildAndStart();
    if (s->server_ == nullptr || port == 0) return absl::InternalError("cannot start the gRPC server");
    s->address_ = absl::StrCat("127.0.0.1:", port);
    return s;
  }

  ~InProcessServer() {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    }
    registry_.ShutdownAll(absl::ZeroDuration());
  }

  const std::string& address() const { return address_; }
  server::Engine* engine(const std::string& name) const { return *registry_.Find(name); }
  const server::ModelRegistry& registry() const { return registry_; }
  RecordingListener* listener(const std::string& name) const {
    for (const auto& [n, l] : listeners_) {
      if (n == name) return l.get();
    }
    return nullptr;
  }

  // A client of this server; `tweak` adjusts the options first.
  std::unique_ptr<client::Client> NewClient(
      const std::function<void(client::ClientOptions*)>& tweak = nullptr) const {
    client::ClientOptions options;
    options.targets = {address_};
    options.default_timeout = absl::Seconds(20);
    if (tweak) tweak(&options);
    absl::StatusOr<std::unique_ptr<client::Client>> c = client::Client::Create(options);
    return c.ok() ? std::move(*c) : nullptr;
  }

  // Waits until every engine has nothing running or waiting and no KV block
  // in use; on timeout returns a description of what is left.
  std::string WaitUntilIdle(absl::Duration timeout = absl::Seconds(10)) const {
    std::string left;
    auto idle = [&] {
      left.clear();
      for (const auto& e : registry_.entries()) {
        const server::EngineStats s = e.engine->stats();
        if (s.running != 0 || s.waiting != 0 || s.kv_blocks_used != 0) {
          absl::StrAppend(&left, e.name, ": running=", s.running, " waiting=", s.waiting,
                          " kv_blocks_used=", s.kv_blocks_used, "; ");
        }
      }
      return left.empty();
    };
    return WaitFor(idle, timeout) ? "" : left;
  }

 private:
  InProcessServer() = default;

  server::ModelRegistry registry_;
  std::vector<std::pair<std::string, std::unique_ptr<RecordingListener>>> listeners_;
  std::unique_ptr<server::DikkatService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

// ---- the dikkat-server binary -----------------------------------------------------

// dikkat-server as a child process. stdout and stderr go to files in a temp
// dir (a pipe nobody drains could block the server). The destructor kills
// a process that is still running.
class ServerProcess {
 public:
  // Starts `dikkat-server args...`; waits for "listening on HOST:PORT" (and
  // the metrics line when --metrics_listen is given) up to `timeout`.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::vector<std::string>& args, absl::Duration timeout = absl::Seconds(30),
      bool wait_for_listening = true) {
    std::unique_ptr<ServerProcess> p(new ServerProcess());
    if (p->dir_.path().empty()) return absl::InternalError("mkdtemp failed");
    p->stdout_path_ = p->dir_.path() + "/stdout";
    p->stderr_path_ = p->dir_.path() + "/stderr";
    std::vector<std::string> argv_storage = {ServerBinary()};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, p->stdout_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, p->stderr_path_.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    // The child must see SIGTERM/SIGINT with default dispositions and an
    // empty mask whatever gtest or gRPC did to this process.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const int rc = posix_spawn(&p->pid_, argv[0], &actions, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
      p->pid_ = -1;
      return absl::InternalError(absl::StrCat("posix_spawn ", argv[0], ": ", std::strerror(rc)));
    }
    for (const std::string& a : args) {
      if (a.rfind("--metrics_listen=", 0) == 0 && a != "--metrics_listen=") {
        if (absl::Status m = p->WaitForMetricsAddress(timeout); !m.ok()) return m;
      }
    }
    if (!wait_for_listening) return p;
    if (absl::Status l = p->WaitForListening(timeout); !l.ok()) return l;
    return p;
  }

  // Parses "listening on HOST:PORT" (printed once the gRPC port is open,
  // after the models are loaded) into grpc_address().
  absl::Status WaitForListening(absl::Duration timeout) {
    std::smatch m;
    if (!WaitForOutput(std::regex(R"(listening on (\S+):(\d+))"), timeout, &m)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no 'listening on' line within ", absl::FormatDuration(timeout), "\n", Logs()));
    }
    grpc_address_ = absl::StrCat(m[1].str(), ":", m[2].str());
    return absl::OkStatus();
  }

  // Parses "metrics on http://HOST:PORT/metrics" (printed before the models
  // are loaded).
  absl::Status WaitForMetricsAddress(absl::Duration timeout) {
    std::smatch m;
    if (!WaitForOutput(std::regex(R"(metrics on http://([^:/\s]+):(\d+)/metrics)"), timeout, &m)) {
      return absl::DeadlineExceededError("no 'metrics on' line\n" + Logs());
    }
    metrics_host_ = m[1].str();
    metrics_port_ = std::stoi(m[2].str());
    return absl::OkStatus();
  }

  ~ServerProcess() {
    if (pid_ > 0 && !exit_status_.has_value()) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }

  pid_t pid() const { return pid_; }
  const std::string& grpc_address() const { return grpc_address_; }
  const std::string& metrics_host() const { return metrics_host_; }
  int metrics_port() const { return metrics_port_; }
  std::string Stdout() const { return ReadFile(stdout_path_); }
  std::string Stderr() const { return ReadFile(stderr_path_); }
  std::string Logs() const {
    return absl::StrCat("---- dikkat-server stdout ----\n", Stdout(),
                        "---- dikkat-server stderr ----\n", Stderr());
  }

  // Waits until stdout+stderr match `pattern`.
  bool WaitForOutput(const std::regex& pattern, absl::Duration timeout,
                     std::smatch* match = nullptr) {
    std::string text;
    std::smatch local;
    std::smatch* m = match != nullptr ? match : &local;
    return WaitFor(
        [&] {
          text = Stdout() + Stderr();
          if (std::regex_search(text, *m, pattern)) {
            // Keep the matched text alive: smatch points into `text`.
            matched_text_ = text;
            std::regex_search(matched_text_, *m, pattern);
            return true;
          }
          return Exited();
        },
        timeout) &&
           !m->empty();
  }

  void Signal(int sig) const { kill(pid_, sig); }

  bool Exited() {
    if (exit_status_.has_value()) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      return true;
    }
    return false;
  }

  // The raw wait status once the process has exited within `timeout`.
  std::optional<int> WaitForExit(absl::Duration timeout) {
    WaitFor([&] { return Exited(); }, timeout);
    return exit_status_;
  }

 private:
  ServerProcess() = default;

  TempDir dir_;
  std::string stdout_path_, stderr_path_;
  std::string matched_text_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  std::string grpc_address_;
  std::string metrics_host_;
  int metrics_port_ = 0;
};

inline std::string DescribeWaitStatus(const std::optional<int>& status) {
  if (!status.has_value()) return "still running";
  if (WIFEXITED(*status)) return absl::StrCat("exit code ", WEXITSTATUS(*status));
  if (WIFSIGNALED(*status)) return absl::StrCat("killed by signal ", WTERMSIG(*status));
  return absl::StrCat("wait status ", *status);
}

// A free TCP port on 127.0.0.1 (bound and released: another process could
// take it in between, which on a test machine's loopback is vanishingly rare).
inline int PickFreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// ---- HTTP ------------------------------------------------------------------------

struct HttpResponse {
  int status = 0;
  std::string body;
};

// GET http://host:port/path with HTTP/1.0 (the server closes the connection
// after the response). IPv4 literal hosts only.
inline absl::StatusOr<HttpResponse> HttpGet(const std::string& host, int port,
                                            const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", host, ":", port, ": ", std::strerror(err)));
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host, "\r\nConnection: close\r\n\r\n");
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("send failed");
  }
  std::string raw;
  char buf[8192];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) raw.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t line_end = raw.find("\r\n");
  const size_t header_end = raw.find("\r\n\r\n");
  HttpResponse r;
  if (line_end == std::string::npos || header_end == std::string::npos ||
      std::sscanf(raw.c_str(), "HTTP/%*s %d", &r.status) != 1) {
    return absl::InternalError("malformed HTTP response: " + raw.substr(0, 200));
  }
  r.body = raw.substr(header_end + 4);
  return r;
}

// The value of the sample `name{labels}` in Prometheus text format, where
// `labels` is the exact label text (e.g. `model="tiny-lm"`).
inline std::optional<double> PrometheusValue(const std::string& text, const std::string& name,
                                             const std::string& labels) {
  const std::string key = labels.empty() ? name + " " : name + "{" + labels + "} ";
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      double v = 0;
      if (absl::SimpleAtod(line.substr(key.size()), &v)) return v;
    }
  }
  return std::nullopt;
}

// ---- requests ----------------------------------------------------------------------

// A greedy Generate that ignores EOS, so it produces exactly max_new_tokens.
inline v1::GenerateRequest GreedyRequest(const std::string& prompt, int max_new_tokens,
                                         const std::string& model = "") {
  v1::GenerateRequest r;
  r.set_model(model);
  r.mutable_input()->set_text(prompt);
  r.mutable_sampling()->set_temperature(0.0f);
  r.set_max_new_tokens(max_new_tokens);
  r.set_ignore_eos(true);
  return r;
}

}  // namespace dikkat::integration

#endif  // DIKKAT_TESTS_INTEGRATION_INTEGRATION_HARNESS_H_
