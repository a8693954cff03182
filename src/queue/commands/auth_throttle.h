// Failed AUTHs are slowed down, so guessing a token or the admin password costs time, not just a
// round trip (20,000 token guesses/s and 778,000 admin-password guesses/s on one connection were
// measured before). One per loop thread, like everything a loop owns.
//
// API:
//  - OnFailure(peer, connection_failures, now_ms): a connection from `peer` failed to
//    authenticate for the n-th time; returns how long its reply waits (ms), the larger of
//      per connection:  50 ms * 2^(n-1), at most 5 s (one typo costs 50 ms; a loop of guesses on
//                       one connection reaches one guess per 5 s after 7 tries),
//      per address:     100 ms for each failure from that address beyond the first 5 within
//                       10 s, at most 10 s (many connections from one host share the bill).
//    Addresses are counted per thread: a host spreading its connections over T threads gets T
//    times the budget, still bounded. At most kMaxSources addresses are tracked; past that, the
//    ones not yet tracked share one bucket.
//  - Hold(port, ticket, due_ms, error) / Release(now_ms): the failure's reply, written when it is
//    due (Release runs every loop tick: 100 ms granularity). The connection reads nothing further
//    meanwhile (a blocking deferred reply), so pipelined guesses wait in its parser.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "queue/context/client_port.h"

namespace deferq::queue {

class AuthThrottle {
 public:
  static constexpr int64_t kFirstDelayMs = 50;
  static constexpr int64_t kMaxConnectionDelayMs = 5000;
  static constexpr int64_t kWindowMs = 10000;
  static constexpr uint32_t kFreeFailures = 5;
  static constexpr int64_t kPerFailureMs = 100;
  static constexpr int64_t kMaxAddressDelayMs = 10000;
  static constexpr size_t kMaxSources = 10000;

  int64_t OnFailure(std::string_view peer, uint32_t connection_failures, int64_t now_ms);

  void Hold(ClientPort* port, const ReplyTicket& ticket, int64_t due_ms, std::string error);
  void Release(int64_t now_ms);
  size_t held() const { return held_.size(); }

 private:
  struct Source {
    int64_t window_start_ms = 0;
    uint32_t failures = 0;
  };
  struct Held {
    ClientPort* port;
    ReplyTicket ticket;
    int64_t due_ms;
    std::string error;
  };
  Source& SourceOf(std::string_view peer, int64_t now_ms);

  std::unordered_map<std::string, Source> sources_;
  Source overflow_;  // addresses beyond kMaxSources
  std::vector<Held> held_;
};

}  // namespace deferq::queue
