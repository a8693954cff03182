// A loop's inbox: the only way another thread reaches an event loop. Loops never touch each
// other's connections, parsers or workers; they post a message here and the owner handles it on
// its own thread, at its next iteration (woken through the loop's eventfd).
//
// Two bounded lanes:
// - hints: the queue room's messages to the loop's queue state (queue::LoopNote, posted through
//   queue::Peers::Post: "jobs became ready on queue T", "queue T has work due at D", "the job a
//   CALL waits for finished"): at most kMaxHints. A hint that does not fit is dropped and a flag
//   set instead, and the owner then reads again every queue it has consumers or pumps on and every
//   parked call's job (what the safety nets do anyway), so a lost hint costs latency, never a job
//   or a wake-up.
// - tasks: closures run on the owner's thread (a CLIENT LIST snapshot, a CLIENT KILL, and the
//   answer that goes back to the loop that asked). Each loop has at most kMaxQueriesInFlight
//   cross-loop queries of its own outstanding, and each query posts at most one request to each
//   loop and one answer back, so a lane never holds more than kMaxQueriesInFlight x loops tasks.
//   PostRequest still checks that bound and refuses past it; the asker then answers its client
//   with an error rather than waiting. PostAnswer is never
//   refused: the asker reserved the room when it started the query.
//
// The mutex guards only this inbox, is held for a push or a swap, and is never held while any
// other lock is taken: it is a leaf, so it cannot take part in a lock-order cycle.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "queue/context/server_context.h"

namespace deferq::net {

class EventLoop;

class Mailbox {
 public:
  using Task = std::function<void(EventLoop&)>;
  // A message for the loop's queue state (queue::Peers::Post).
  using Hint = queue::LoopNote;
  // What the owner takes out in one go.
  struct Batch {
    std::vector<Hint> hints;
    bool hints_overflowed = false;  // some hints were dropped: poll everything
    std::vector<Task> tasks;
  };

  static constexpr size_t kMaxHints = 4096;
  // Cross-loop queries (CLIENT LIST, CLIENT KILL, INFO clients) one loop may have outstanding.
  static constexpr size_t kMaxQueriesInFlight = 256;

  // wake_fd: the owner's eventfd, written when the inbox goes from empty to non-empty.
  Mailbox(int wake_fd, int loops);
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // Any thread. Never blocks, never fails (see the overflow rule above).
  void PostHint(Hint hint);
  // Any thread. kFull past the lane's bound, kClosed once the owner has stopped serving (it has
  // no clients left); the task is then not run.
  enum class PostResult { kPosted, kFull, kClosed };
  PostResult PostRequest(Task task);
  // Any thread. The answer to a query the owner started; dropped if the owner has stopped.
  void PostAnswer(Task task);

  // Owner's thread: everything posted so far.
  void Take(Batch* batch);
  // Owner's thread, once it stops serving: everything still posted is returned and later
  // requests are refused, so no asker waits for a loop that is gone.
  void Close(Batch* batch);

 private:
  // True when the owner must be woken.
  bool WasEmptyLocked() const DQ_REQUIRES(mu_);
  void Wake() const;

  const int wake_fd_;
  const size_t max_tasks_;
  base::Mutex mu_;
  std::vector<Hint> hints_ DQ_GUARDED_BY(mu_);
  bool hints_overflowed_ DQ_GUARDED_BY(mu_) = false;
  std::vector<Task> tasks_ DQ_GUARDED_BY(mu_);
  bool closed_ DQ_GUARDED_BY(mu_) = false;
};

}  // namespace deferq::net
