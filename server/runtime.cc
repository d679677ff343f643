#include "server/runtime.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <thread>

namespace dikkat::server {

int SetComputeThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(threads);
  return at::get_num_threads();
}

}  // namespace dikkat::server
