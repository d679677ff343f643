// HttpWorkerPool: the cpp-httplib task queue of dikkat's HTTP ports (the
// metrics port, server/metrics_http.h, and the OpenAI-compatible port,
// server/openai_http.h): up to `max_workers` threads, started as connections
// need them, and up to `max_waiting` connections waiting for a free worker.
//
// Past that, enqueue runs the connection's task at once on the accept thread
// with RefusingConnection() true: the server's process_and_close_socket then
// answers 503 without reading anything and closes (httplib 0.11.4's
// TaskQueue cannot refuse a task, and the task owns the socket).
//
// Thread-safe. shutdown() runs what is queued (each connection is bounded by
// its deadlines), then joins the workers; idempotent.
#ifndef DIKKAT_SERVER_HTTP_WORKER_POOL_H_
#define DIKKAT_SERVER_HTTP_WORKER_POOL_H_

#include <httplib.h>

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "common/sync.h"

namespace dikkat::server {

class HttpWorkerPool final : public httplib::TaskQueue {
 public:
  HttpWorkerPool(int max_workers, int max_waiting);
  ~HttpWorkerPool() override { shutdown(); }

  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  // True on the accept thread while it runs a task the pool turned away.
  static bool RefusingConnection();

 private:
  void Work();

  const int max_workers_;
  const int max_waiting_;
  dikkat::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  int idle_ ABSL_GUARDED_BY(mu_) = 0;  // workers not running a job
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_HTTP_WORKER_POOL_H_
