// Process-wide LibTorch settings, behind a torch-free header so that main.cc
// does not compile LibTorch headers.
#ifndef DIKKAT_SERVER_RUNTIME_H_
#define DIKKAT_SERVER_RUNTIME_H_

namespace dikkat::server {

// Sets LibTorch's intra-op thread count (at::set_num_threads). 0 means the
// number of online cores. Returns the count in effect afterwards. Call once,
// before any model is loaded.
int SetComputeThreads(int threads);

}  // namespace dikkat::server

#endif  // DIKKAT_SERVER_RUNTIME_H_
