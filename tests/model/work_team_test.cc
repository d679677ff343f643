// The work team that shares the decode kernels' loops (model/work_team.h):
// every index is run exactly once whatever the sizes, loops follow each other
// by the thousand, several threads may start loops at once (one leads the
// team, the others run on LibTorch's pool), and a loop inside a loop works.
// Part of the ThreadSanitizer suites (label tsan).
#include "model/work_team.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace dikkat::model {
namespace {

// Runs one loop and checks that [0, n) was covered exactly once by ranges of
// at least `grain` (but the last).
void CheckCoverage(int64_t n, int64_t grain, int threads) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  std::atomic<int> short_ranges{0};
  TeamParallelFor(
      n, grain,
      [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LT(b, e);
        ASSERT_LE(e, n);
        if (e - b < grain && e != n) ++short_ranges;
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
      },
      threads);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of n=" << n << " grain=" << grain
                                 << " threads=" << threads;
  }
  EXPECT_EQ(short_ranges.load(), 0);
}

TEST(WorkTeamTest, EveryIndexRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 64, 5000}) CheckCoverage(n, grain, threads);
    }
  }
}

TEST(WorkTeamTest, ManyLoopsInARowLoseNothing) {
  // A decode step runs ~70 loops back to back; helpers that wake late must
  // neither run a finished loop's chunks nor miss the next loop's.
  std::atomic<int64_t> total{0};
  int64_t expected = 0;
  for (int loop = 0; loop < 5000; ++loop) {
    const int64_t n = 1 + loop % 37;
    expected += n * (n - 1) / 2;
    TeamParallelFor(
        n, 1,
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) total.fetch_add(i, std::memory_order_relaxed);
        },
        2);
  }
  EXPECT_EQ(total.load(), expected);
}

TEST(WorkTeamTest, WritesOfTheHelpersAreVisibleToTheCaller) {
  // Plain (non-atomic) writes in the loop body, read after the loop returns:
  // the loop's end must order them (ThreadSanitizer checks this).
  for (int loop = 0; loop < 200; ++loop) {
    std::vector<int64_t> out(512, -1);
    TeamParallelFor(
        static_cast<int64_t>(out.size()), 8,
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) out[i] = i * loop;
        },
        2);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<int64_t>(i) * loop);
  }
}

TEST(WorkTeamTest, SeveralCallersAtOnce) {
  // Two engines (two models) decode at the same time: one thread leads the
  // team, the others fall back to LibTorch's pool; all results are right.
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int loop = 0; loop < 300; ++loop) {
        const int64_t n = 50 + (loop + t) % 50;
        std::vector<int> out(static_cast<size_t>(n), 0);
        TeamParallelFor(
            n, 4,
            [&](int64_t b, int64_t e) {
              for (int64_t i = b; i < e; ++i) out[i] += 1;
            },
            2);
        for (int v : out) {
          if (v != 1) ++failures;
        }
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(WorkTeamTest, HelpersTakePart) {
  // Chunks of ~20 us: over 100 loops the helper thread gets some of them
  // (or the team would be only overhead).
  std::mutex mu;
  std::set<std::thread::id> ids;
  for (int loop = 0; loop < 100; ++loop) {
    TeamParallelFor(
        64, 1,
        [&](int64_t, int64_t) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
          while (std::chrono::steady_clock::now() < until) {
          }
          std::lock_guard<std::mutex> lock(mu);
          ids.insert(std::this_thread::get_id());
        },
        2);
  }
  EXPECT_GE(ids.size(), 2u);
}

TEST(WorkTeamTest, ALoopInsideALoop) {
  std::atomic<int64_t> total{0};
  TeamParallelFor(
      8, 1,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          TeamParallelFor(
              100, 10,
              [&](int64_t b2, int64_t e2) { total.fetch_add(e2 - b2, std::memory_order_relaxed); },
              2);
        }
      },
      2);
  EXPECT_EQ(total.load(), 800);
}

}  // namespace
}  // namespace dikkat::model
