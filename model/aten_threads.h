// LibTorch operators on small tensors, on the calling thread alone.
//
// Waking LibTorch's OpenMP team costs ~25 us per operator on 2 cores with
// OMP_WAIT_POLICY=PASSIVE (server/runtime.cc sets it: spinning OpenMP
// threads would take the cores from the kernels' own work team), more than
// a layer_norm, GELU or softmax of decode or short-prompt size takes on one
// core. Measured on an AMD EPYC Zen 5, 2 threads against 1, us per call:
// layer_norm 8 x 768 32 / 4.7 and 32 x 768 38 / 14; erf GELU (oneDNN)
// 1 x 3072 31 / 5.3, 32 x 3072 55 / 38, 64 x 3072 82 / 82 (level); see
// docs/performance.md, "LibTorch's threads at decode sizes". Torch-free.
#ifndef DIKKAT_MODEL_ATEN_THREADS_H_
#define DIKKAT_MODEL_ATEN_THREADS_H_

#include <cstdint>

namespace dikkat::model {

// Up to this many elements an operator's input counts as small.
inline constexpr int64_t kSerialAtenMaxElements = int64_t{1} << 17;

// While alive and `serial`, LibTorch operators called from this thread run
// on it alone. OpenMP's thread count is a per-thread setting: other threads,
// and the kernels' work team (work_team.h), are unaffected.
class SerialAtenOps {
 public:
  explicit SerialAtenOps(bool serial);
  ~SerialAtenOps();
  SerialAtenOps(const SerialAtenOps&) = delete;
  SerialAtenOps& operator=(const SerialAtenOps&) = delete;

 private:
  int restore_ = 0;  // the thread count to restore; 0: nothing changed
};

// For benchmarks: false makes every SerialAtenOps a no-op (LibTorch's
// operators on its whole team, as before), so that both can be measured side
// by side in one process. Default true.
void SetSerialAtenOps(bool enabled);

}  // namespace dikkat::model

#endif  // DIKKAT_MODEL_ATEN_THREADS_H_
