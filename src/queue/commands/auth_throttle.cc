#include "queue/commands/auth_throttle.h"

#include <algorithm>

namespace deferq::queue {

AuthThrottle::Source& AuthThrottle::SourceOf(std::string_view peer, int64_t now_ms) {
  auto it = sources_.find(std::string(peer));
  if (it != sources_.end()) return it->second;
  if (sources_.size() >= kMaxSources) {
    std::erase_if(sources_,
                  [&](const auto& kv) { return now_ms - kv.second.window_start_ms >= kWindowMs; });
  }
  if (sources_.size() >= kMaxSources) return overflow_;
  return sources_.emplace(std::string(peer), Source{now_ms, 0}).first->second;
}

int64_t AuthThrottle::OnFailure(std::string_view peer, uint32_t connection_failures,
                                int64_t now_ms) {
  Source& s = SourceOf(peer, now_ms);
  if (now_ms - s.window_start_ms >= kWindowMs) s = Source{now_ms, 0};
  ++s.failures;
  const uint32_t n = std::max<uint32_t>(1, connection_failures);
  // 50 ms * 2^(n-1), computed without overflow for any n.
  const int64_t conn_delay =
      n > 8 ? kMaxConnectionDelayMs : std::min(kMaxConnectionDelayMs, kFirstDelayMs << (n - 1));
  const int64_t beyond = s.failures > kFreeFailures ? s.failures - kFreeFailures : 0;
  const int64_t addr_delay = std::min(kMaxAddressDelayMs, beyond * kPerFailureMs);
  return std::max(conn_delay, addr_delay);
}

void AuthThrottle::Hold(ClientPort* port, const ReplyTicket& ticket, int64_t due_ms,
                        std::string error) {
  held_.push_back(Held{port, ticket, due_ms, std::move(error)});
}

void AuthThrottle::Release(int64_t now_ms) {
  if (held_.empty()) return;
  // Few at a time (one per connection that failed): a scan is enough.
  std::vector<Held> due;
  std::erase_if(held_, [&](Held& h) {
    if (h.due_ms > now_ms) return false;
    due.push_back(std::move(h));
    return true;
  });
  for (Held& h : due) {
    proto::ReplyWriter* out = h.port->Begin(h.ticket);
    if (out == nullptr) continue;  // the client left meanwhile
    out->Error(h.error);
    h.port->Finish(h.ticket);
  }
}

}  // namespace deferq::queue
