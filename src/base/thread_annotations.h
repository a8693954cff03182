// Thread rules the compiler checks: clang's -Wthread-safety attributes (the meson build turns the
// warning on under clang; with GCC the macros expand to nothing), and a mutex that carries them.
//
// API:
//   base::Mutex mu_;                        a std::mutex that clang knows is a capability
//   int x_ DQ_GUARDED_BY(mu_);              x_ is read and written only with mu_ held
//   void FooLocked() DQ_REQUIRES(mu_);      callers must hold mu_
//   base::MutexLock lock(&mu_);             holds mu_ until the end of the scope
//   base::CondVar cv_; cv_.Wait(&mu_);      sleeps with mu_ released until a NotifyAll
//
// Used on the little state that threads share (docs/architecture.md, "Who owns what"); a loop's
// own state needs no lock and has none.
#pragma once

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define DQ_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DQ_THREAD_ANNOTATION(x)
#endif

#define DQ_CAPABILITY(name) DQ_THREAD_ANNOTATION(capability(name))
#define DQ_SCOPED_CAPABILITY DQ_THREAD_ANNOTATION(scoped_lockable)
#define DQ_GUARDED_BY(mu) DQ_THREAD_ANNOTATION(guarded_by(mu))
#define DQ_PT_GUARDED_BY(mu) DQ_THREAD_ANNOTATION(pt_guarded_by(mu))
#define DQ_REQUIRES(...) DQ_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define DQ_EXCLUDES(...) DQ_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define DQ_ACQUIRE(...) DQ_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define DQ_RELEASE(...) DQ_THREAD_ANNOTATION(release_capability(__VA_ARGS__))

namespace deferq::base {

class DQ_CAPABILITY("mutex") Mutex {
 public:
  void Lock() DQ_ACQUIRE() { mu_.lock(); }
  void Unlock() DQ_RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

class DQ_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) DQ_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() DQ_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable on a base::Mutex (abseil's CondVar): Wait releases the mutex while it
// sleeps and holds it again when it returns. Wake-ups may be spurious: wait in a loop on the
// guarded condition.
class CondVar {
 public:
  void Wait(Mutex* mu) DQ_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();  // still held: the caller's MutexLock unlocks it
  }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace deferq::base
