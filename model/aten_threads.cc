#include "model/aten_threads.h"

#include <omp.h>

#include <atomic>

namespace dikkat::model {
namespace {

std::atomic<bool> serial_enabled{true};  // SetSerialAtenOps

}  // namespace

void SetSerialAtenOps(bool enabled) { serial_enabled.store(enabled, std::memory_order_relaxed); }

SerialAtenOps::SerialAtenOps(bool serial) {
  if (!serial || !serial_enabled.load(std::memory_order_relaxed)) return;
  const int threads = omp_get_max_threads();
  if (threads <= 1) return;
  restore_ = threads;
  omp_set_num_threads(1);
}

SerialAtenOps::~SerialAtenOps() {
  if (restore_ > 0) omp_set_num_threads(restore_);
}

}  // namespace dikkat::model
