#include "server/http_worker_pool.h"

#include <algorithm>
#include <utility>

namespace dikkat::server {
namespace {

// Set on the accept thread while the pool turns a connection away.
thread_local bool t_refuse_connection = false;

}  // namespace

HttpWorkerPool::HttpWorkerPool(int max_workers, int max_waiting)
    : max_workers_(std::max(max_workers, 1)), max_waiting_(std::max(max_waiting, 0)) {}

bool HttpWorkerPool::RefusingConnection() { return t_refuse_connection; }

void HttpWorkerPool::enqueue(std::function<void()> fn) {
  {
    dikkat::MutexLock lock(&mu_);
    // Idle workers each take one queued job; the rest wait.
    const int queued = static_cast<int>(jobs_.size());
    bool accept = queued < idle_;
    if (!accept && static_cast<int>(threads_.size()) < max_workers_) {
      ++idle_;
      threads_.emplace_back([this] { Work(); });
      accept = true;
    }
    if (!accept) accept = queued - idle_ < max_waiting_;
    if (accept) {
      jobs_.push_back(std::move(fn));
      return;
    }
  }
  t_refuse_connection = true;
  fn();
  t_refuse_connection = false;
}

void HttpWorkerPool::shutdown() {
  std::vector<std::thread> threads;
  {
    dikkat::MutexLock lock(&mu_);
    shutdown_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void HttpWorkerPool::Work() {
  dikkat::MutexLock lock(&mu_);
  while (true) {
    auto ready = [this]()
                     ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !jobs_.empty() || shutdown_; };
    mu_.Await(absl::Condition(&ready));
    if (jobs_.empty()) return;  // shut down
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    --idle_;
    mu_.Unlock();
    job();
    mu_.Lock();
    ++idle_;
  }
}

}  // namespace dikkat::server
