// The threads that share the loops of the decode kernels (cpu_kernels.cc).
//
// A decode step runs ~70 short parallel loops (a few hundred microseconds
// each). With OpenMP every loop ends at a barrier that waits until every
// thread of the team has checked in, including one that the OS has not
// woken yet or that lost its core to another process; with passive waiting
// (which the server needs, docs/performance.md) that wake-up is paid on
// every loop. Here a loop ends when its chunks are done: the calling thread
// takes chunks itself from the start, a helper that wakes late finds nothing
// left and goes back to waiting, and the caller only ever waits for chunks a
// helper has actually started. Helpers spin briefly between loops (a decode
// step's loops follow each other within microseconds), then sleep.
#ifndef DIKKAT_MODEL_WORK_TEAM_H_
#define DIKKAT_MODEL_WORK_TEAM_H_

#include <cstdint>
#include <type_traits>

namespace dikkat::model {

namespace work_team_internal {
using ChunkFn = void (*)(void* ctx, int64_t begin, int64_t end);
// Runs fn(ctx, b, e) over [0, n) in chunks of at least `grain`, on the caller
// and up to `threads - 1` helpers.
void ParallelFor(int64_t n, int64_t grain, int threads, ChunkFn fn, void* ctx);
}  // namespace work_team_internal

// Runs body(begin, end) over disjoint ranges covering [0, n), each at least
// `grain` long (but the last), on the calling thread and the team's helpers
// (`threads` in all; at::get_num_threads() when 0). Returns when all are done.
// If another thread is using the team, this call runs on LibTorch's pool
// (at::parallel_for) instead. `body` must not throw.
template <typename Body>
void TeamParallelFor(int64_t n, int64_t grain, const Body& body, int threads = 0) {
  using B = std::remove_reference_t<Body>;
  work_team_internal::ParallelFor(
      n, grain, threads,
      [](void* ctx, int64_t b, int64_t e) { (*static_cast<const B*>(ctx))(b, e); },
      const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_WORK_TEAM_H_
