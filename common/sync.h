// Locks, condition variables and notifications used across dikkat.
//
// Normally these are Abseil's own types. Under ThreadSanitizer they are small
// equivalents built on std::mutex and std::condition_variable, because
// Debian's Abseil is not built with TSan: absl::Mutex synchronises through
// atomics and futexes inside an uninstrumented library, TSan sees none of it,
// and every field guarded by an absl::Mutex would be reported as a race.
// libstdc++'s primitives go through pthread, which TSan intercepts. The
// subset of the Abseil API that dikkat uses is kept, so code reads the same in
// both builds (docs/hardening.md).
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#if defined(__SANITIZE_THREAD__)
#define DIKKAT_TSAN_SYNC 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DIKKAT_TSAN_SYNC 1
#endif
#endif

#ifdef DIKKAT_TSAN_SYNC
#include <chrono>
#include <condition_variable>
#include <mutex>
#endif

namespace dikkat {

#ifndef DIKKAT_TSAN_SYNC

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;
using ReaderMutexLock = absl::ReaderMutexLock;
using CondVar = absl::CondVar;
using Notification = absl::Notification;

#else  // DIKKAT_TSAN_SYNC

namespace sync_internal {
inline std::chrono::steady_clock::time_point Deadline(absl::Duration timeout) {
  const auto now = std::chrono::steady_clock::now();
  if (timeout >= absl::Hours(24 * 365)) return now + std::chrono::hours(24 * 365);
  return now + absl::ToChronoNanoseconds(timeout);
}
}  // namespace sync_internal

class CondVar;

// absl::Mutex's interface over std::mutex. Await() waits on a condition
// variable that every Unlock() signals while someone awaits, which is how
// absl::Mutex re-evaluates conditions on release.
class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (awaiting_ > 0) changed_.notify_all();
    mu_.unlock();
  }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { Lock(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { Unlock(); }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
  void AssertReaderHeld() const ABSL_ASSERT_SHARED_LOCK() {}

  void Await(const absl::Condition& cond) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    AwaitUntil(cond, std::chrono::steady_clock::time_point::max());
  }
  bool AwaitWithTimeout(const absl::Condition& cond, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    return AwaitUntil(cond, sync_internal::Deadline(timeout));
  }
  void LockWhen(const absl::Condition& cond) ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    Lock();
    Await(cond);
  }
  bool LockWhenWithTimeout(const absl::Condition& cond, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    Lock();
    return AwaitWithTimeout(cond, timeout);
  }

 private:
  friend class CondVar;

  bool AwaitUntil(const absl::Condition& cond, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    ++awaiting_;
    bool ok = cond.Eval();
    while (!ok) {
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
        ok = cond.Eval();
        break;
      }
      ok = cond.Eval();
    }
    --awaiting_;
    lock.release();
    return ok;
  }

  std::mutex mu_;
  std::condition_variable changed_;
  int awaiting_ = 0;  // guarded by mu_
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  Mutex* const mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  void Wait(Mutex* mu) { WaitUntil(mu, std::chrono::steady_clock::time_point::max()); }
  // True when the timeout expired (absl::CondVar's convention).
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
    return WaitUntil(mu, sync_internal::Deadline(timeout));
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline) {
    // Waiting releases the mutex: whoever awaits a condition on it must
    // re-evaluate, as after an Unlock().
    if (mu->awaiting_ > 0) mu->changed_.notify_all();
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const bool timed_out = cv_.wait_until(lock, deadline) == std::cv_status::timeout;
    lock.release();
    return timed_out;
  }

  std::condition_variable cv_;
};

class Notification {
 public:
  Notification() = default;
  Notification(const Notification&) = delete;
  Notification& operator=(const Notification&) = delete;

  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
  }
  bool HasBeenNotified() const {
    MutexLock lock(&mu_);
    return notified_;
  }
  void WaitForNotification() const {
    MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&notified_));
  }
  bool WaitForNotificationWithTimeout(absl::Duration timeout) const {
    MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&notified_), timeout);
  }

 private:
  mutable Mutex mu_;
  bool notified_ = false;
};

#endif  // DIKKAT_TSAN_SYNC

}  // namespace dikkat
