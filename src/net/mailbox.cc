#include "net/mailbox.h"

#include <unistd.h>

#include <cstdint>

namespace deferq::net {

Mailbox::Mailbox(int wake_fd, int loops)
    : wake_fd_(wake_fd), max_tasks_(kMaxQueriesInFlight * static_cast<size_t>(loops)) {}

bool Mailbox::WasEmptyLocked() const {
  return hints_.empty() && !hints_overflowed_ && tasks_.empty();
}

void Mailbox::Wake() const {
  // An eventfd write never blocks: the counter only overflows after 2^64 - 2 unread writes.
  uint64_t one = 1;
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;
}

void Mailbox::PostHint(Hint hint) {
  bool wake;
  {
    base::MutexLock lock(&mu_);
    if (closed_) return;
    wake = WasEmptyLocked();
    if (hints_.size() < kMaxHints) {
      hints_.push_back(std::move(hint));
    } else {
      hints_overflowed_ = true;
    }
  }
  if (wake) Wake();
}

Mailbox::PostResult Mailbox::PostRequest(Task task) {
  bool wake;
  {
    base::MutexLock lock(&mu_);
    if (closed_) return PostResult::kClosed;
    if (tasks_.size() >= max_tasks_) return PostResult::kFull;
    wake = WasEmptyLocked();
    tasks_.push_back(std::move(task));
  }
  if (wake) Wake();
  return PostResult::kPosted;
}

void Mailbox::PostAnswer(Task task) {
  bool wake;
  {
    base::MutexLock lock(&mu_);
    if (closed_) return;
    wake = WasEmptyLocked();
    tasks_.push_back(std::move(task));
  }
  if (wake) Wake();
}

void Mailbox::Take(Batch* batch) {
  batch->hints.clear();
  batch->tasks.clear();
  base::MutexLock lock(&mu_);
  batch->hints.swap(hints_);
  batch->tasks.swap(tasks_);
  batch->hints_overflowed = hints_overflowed_;
  hints_overflowed_ = false;
}

void Mailbox::Close(Batch* batch) {
  {
    base::MutexLock lock(&mu_);
    closed_ = true;
  }
  Take(batch);
}

}  // namespace deferq::net
