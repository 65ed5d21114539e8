// ThreadSanitizer and Debian's abseil (TSan build only: RDATTN_SANITIZE=thread links this into
// every target; docs/build.md, "Sanitizer builds").
//
// Debian's libabsl_synchronization is not built with -fsanitize=thread, so TSan cannot see that
// absl::Mutex orders anything: its lock word is an atomic in uninstrumented code and it sleeps on
// a raw futex. Every member guarded by an absl::Mutex (the coordinator's Core) would then be
// reported as a race. This file defines the Mutex and CondVar entry points that rdattn and gRPC
// call; the executable's definitions take precedence over the shared library's, each forwards to
// the real function (dlsym RTLD_NEXT) and tells TSan what it did: a lock acquires the mutex's
// happens-before edge, an unlock releases it, and a CondVar wait releases and re-acquires. That is
// what abseil itself does when it is compiled with TSan; it adds no ordering the mutex does not
// provide, so races on data that is not under the mutex are still reported.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

extern "C" {
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

template <typename F>
F Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_sync: %s not found: %s\n", name, dlerror());
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

// The mangled names of abseil 20220623 as Debian builds it (inline namespace debian3); a
// different abseil fails loudly at link time or in Real() rather than silently.
#define RDATTN_ABSL_MUTEX(name) "_ZN4absl7debian35Mutex" name
#define RDATTN_ABSL_CONDVAR(name) "_ZN4absl7debian37CondVar" name

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const auto real = Real<void (*)(Mutex*)>(RDATTN_ABSL_MUTEX("4LockEv"));
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  static const auto real = Real<void (*)(Mutex*)>(RDATTN_ABSL_MUTEX("10ReaderLockEv"));
  real(this);
  __tsan_acquire(this);
}

bool Mutex::TryLock() {
  static const auto real = Real<bool (*)(Mutex*)>(RDATTN_ABSL_MUTEX("7TryLockEv"));
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::Unlock() {
  static const auto real = Real<void (*)(Mutex*)>(RDATTN_ABSL_MUTEX("6UnlockEv"));
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  static const auto real = Real<void (*)(Mutex*)>(RDATTN_ABSL_MUTEX("12ReaderUnlockEv"));
  __tsan_release(this);
  real(this);
}

void CondVar::Wait(Mutex* mu) {
  static const auto real =
      Real<void (*)(CondVar*, Mutex*)>(RDATTN_ABSL_CONDVAR("4WaitEPNS0_5MutexE"));
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, absl::Duration)>(
      RDATTN_ABSL_CONDVAR("15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE"));
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, absl::Time)>(
      RDATTN_ABSL_CONDVAR("16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE"));
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl
