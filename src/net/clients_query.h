// One CLIENT LIST / INFO clients / CLIENT KILL in flight across the loops: the asking loop answers
// its own part, sends the query to every other loop through its Mailbox, and each loop writes its
// part into its own slot (so no slot has two writers and no lock is needed). Whichever loop
// arrives last posts the answer back to the asking loop, which merges the parts in loop order
// and calls `done` there. The parts are handed over through the mailboxes' mutexes and the
// acq_rel countdown, so the asking loop reads them after every writer is done.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "queue/context/server_context.h"

namespace deferq::net {

class ClientsFanout {
 public:
  ClientsFanout(queue::ClientsQuery query, int origin, int loops, queue::ClientsDone done)
      : query_(std::move(query)),
        origin_(origin),
        parts_(static_cast<size_t>(loops)),
        remaining_(loops),
        done_(std::move(done)) {}

  const queue::ClientsQuery& query() const { return query_; }
  int origin() const { return origin_; }
  // Written only by loop `loop`, before its Arrive().
  queue::ClientsReport& part(int loop) { return parts_[static_cast<size_t>(loop)]; }
  // One loop's part is in. True for the last one: the caller then sends the answer to origin().
  bool Arrive() { return remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1; }
  // On the origin loop, after the last Arrive(): merges the parts and calls `done`.
  void Complete();

  // Merges parts in loop order: lists concatenated, counts summed, buffers' maxima, first error.
  static queue::ClientsReport Merge(const std::vector<queue::ClientsReport>& parts);

 private:
  const queue::ClientsQuery query_;
  const int origin_;
  std::vector<queue::ClientsReport> parts_;
  std::atomic<int> remaining_;
  queue::ClientsDone done_;
};

}  // namespace deferq::net
