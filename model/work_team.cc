#include "model/work_team.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/Parallel.h>

namespace dikkat::model::work_team_internal {
namespace {

// The loop being shared, in one word so that a thread claiming a chunk learns
// in the same atomic step which loop it belongs to and whether it exists:
// generation (24 bits) | chunk count (20 bits) | next chunk (20 bits).
constexpr int kNextBits = 20;
constexpr int kCountBits = 20;
constexpr int kGenShift = kNextBits + kCountBits;
constexpr uint64_t kNextMask = (uint64_t{1} << kNextBits) - 1;
constexpr uint64_t kGenMask = (uint64_t{1} << 24) - 1;
// Fewer than 2^20 minus the threads that may each add one failed claim.
constexpr int64_t kMaxChunks = int64_t{1} << 19;

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Set while a thread runs a loop as the team's caller: a loop body that
// starts another loop runs it on LibTorch's pool instead.
thread_local bool t_leading = false;

uint64_t Gen(uint64_t claim) { return claim >> kGenShift; }
int64_t Count(uint64_t claim) {
  return static_cast<int64_t>((claim >> kNextBits) & ((uint64_t{1} << kCountBits) - 1));
}
int64_t Next(uint64_t claim) { return static_cast<int64_t>(claim & kNextMask); }

// How long a helper keeps looking for the next loop before it sleeps: longer
// than the gaps between the loops of one decode step, short enough to give
// the core back soon when the step is over or another process needs it.
constexpr auto kHelperSpin = std::chrono::microseconds(50);

class Team {
 public:
  static Team& Get() {
    static Team* team = new Team();  // never destroyed: helpers live as long as the process
    return *team;
  }

  // False if another thread is using the team.
  bool TryRun(int64_t n, int64_t grain, int threads, ChunkFn fn, void* ctx) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    EnsureHelpers(threads - 1);
    grain = std::max<int64_t>({grain, 1, (n + kMaxChunks - 1) / kMaxChunks});
    const int64_t chunks = (n + grain - 1) / grain;
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    n_.store(n, std::memory_order_relaxed);
    grain_.store(grain, std::memory_order_relaxed);
    allowed_.store(threads - 1, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    gen_ = (gen_ + 1) & kGenMask;
    // Publishes the fields above to whoever claims a chunk of this loop.
    claim_.store((gen_ << kGenShift) | (static_cast<uint64_t>(chunks) << kNextBits),
                 std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(sleep_mu_); }
      wake_.notify_all();
    }
    int64_t mine = 0;
    for (;;) {
      const uint64_t old = claim_.fetch_add(1, std::memory_order_acq_rel);
      const int64_t c = Next(old);
      if (c >= chunks) break;
      fn(ctx, c * grain, std::min(n, (c + 1) * grain));
      ++mine;
    }
    // Only chunks a helper has started are left: wait for those.
    for (int spins = 0; done_.load(std::memory_order_acquire) != chunks - mine; ++spins) {
      if (spins < 4096) {
        CpuRelax();
      } else {
        std::this_thread::yield();  // the helper lost its core mid-chunk
      }
    }
    return true;
  }

 private:
  void EnsureHelpers(int count) {  // under busy_
    while (static_cast<int>(helpers_.size()) < count) {
      const int index = static_cast<int>(helpers_.size());
      helpers_.emplace_back([this, index] { HelperLoop(index); });
    }
  }

  void HelperLoop(int index) {
    uint64_t finished_gen = Gen(claim_.load(std::memory_order_acquire));
    auto idle_since = std::chrono::steady_clock::now();
    for (int polls = 0;; ++polls) {
      const uint64_t seen = claim_.load(std::memory_order_acquire);
      if (Gen(seen) != finished_gen) {
        if (Next(seen) < Count(seen) && index < allowed_.load(std::memory_order_relaxed)) {
          const uint64_t old = claim_.fetch_add(1, std::memory_order_acq_rel);
          const int64_t c = Next(old);
          if (c < Count(old)) {
            // The loop cannot end (and its fields change) before this chunk
            // is counted done, so they are this loop's.
            const int64_t n = n_.load(std::memory_order_relaxed);
            const int64_t grain = grain_.load(std::memory_order_relaxed);
            fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), c * grain,
                                                std::min(n, (c + 1) * grain));
            done_.fetch_add(1, std::memory_order_release);
            idle_since = std::chrono::steady_clock::now();
            polls = 0;
            continue;
          }
          finished_gen = Gen(old);
        } else {
          finished_gen = Gen(seen);
        }
      }
      CpuRelax();
      if ((polls & 63) != 63 || std::chrono::steady_clock::now() - idle_since < kHelperSpin) {
        continue;
      }
      std::unique_lock<std::mutex> lock(sleep_mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      const uint64_t last = claim_.load(std::memory_order_seq_cst);
      if (Gen(last) == finished_gen) {
        wake_.wait(lock, [&] { return Gen(claim_.load(std::memory_order_seq_cst)) != finished_gen; });
      }
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
      idle_since = std::chrono::steady_clock::now();
      polls = 0;
    }
  }

  std::mutex busy_;                  // one caller at a time
  std::vector<std::thread> helpers_;  // guarded by busy_
  uint64_t gen_ = 0;                  // guarded by busy_

  std::atomic<uint64_t> claim_{0};
  std::atomic<ChunkFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<int64_t> n_{0};
  std::atomic<int64_t> grain_{1};
  std::atomic<int> allowed_{0};      // helpers with index < allowed_ take part
  std::atomic<int64_t> done_{0};     // chunks finished by helpers

  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

}  // namespace

void ParallelFor(int64_t n, int64_t grain, int threads, ChunkFn fn, void* ctx) {
  if (n <= 0) return;
  if (threads <= 0) threads = at::get_num_threads();
  grain = std::max<int64_t>(grain, 1);
  if (threads <= 1 || n <= grain) {
    fn(ctx, 0, n);
    return;
  }
  if (!t_leading) {
    t_leading = true;
    const bool ran = Team::Get().TryRun(n, grain, threads, fn, ctx);
    t_leading = false;
    if (ran) return;
  }
  at::parallel_for(0, n, grain, [&](int64_t b, int64_t e) { fn(ctx, b, e); });
}

}  // namespace dikkat::model::work_team_internal
