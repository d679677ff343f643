#include "common/failpoint.h"

#include <atomic>
#include <set>
#include <string>

#include "common/sync.h"

namespace dikkat {
namespace {

std::atomic<int> armed_count{0};

struct Armed {
  dikkat::Mutex mu;
  std::set<std::string, std::less<>> names ABSL_GUARDED_BY(mu);
};

Armed& armed() {
  static Armed* a = new Armed();
  return *a;
}

}  // namespace

void SetFailpoint(std::string_view name, bool on) {
  Armed& a = armed();
  dikkat::MutexLock lock(&a.mu);
  if (on) {
    a.names.emplace(name);
  } else {
    auto it = a.names.find(name);
    if (it != a.names.end()) a.names.erase(it);
  }
  armed_count.store(static_cast<int>(a.names.size()), std::memory_order_relaxed);
}

bool FailpointArmed(std::string_view name) {
  if (armed_count.load(std::memory_order_relaxed) == 0) return false;
  Armed& a = armed();
  dikkat::MutexLock lock(&a.mu);
  return a.names.find(name) != a.names.end();
}

}  // namespace dikkat
