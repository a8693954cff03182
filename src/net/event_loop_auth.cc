// The auth gate of an EventLoop (net/event_loop.h): with auth.required, connections that have
// not authenticated are kept in order of arrival, hold at most their share of max_clients (a new
// one closes the oldest) and are closed auth.timeout after they were accepted. The rest of the
// loop is event_loop.cc.
#include "base/log.h"
#include "net/event_loop.h"

namespace deferq::net {

void EventLoop::NoteAuthChange(Connection* c) {
  if (c->session.authenticated) {
    --unauthenticated_count_;  // its entry in unauthenticated_ is dropped when met
  } else {
    // RESET, or a revoked token: unauthenticated again, from now.
    ++unauthenticated_count_;
    unauthenticated_.push_back({c->slot, c->gen, now_ms_});
    c->accepted_ms = now_ms_;
  }
}

void EventLoop::EvictOldestUnauthenticated() {
  while (!unauthenticated_.empty()) {
    Connection* c = Unauthenticated(unauthenticated_.front());
    unauthenticated_.pop_front();
    if (c == nullptr) continue;
    LoopStats::Add(stats_.unauthenticated_evictions, 1);
    DQ_LOG(kWarning,
           "client id=%llu addr=%s closed: unauthenticated connections hold their share of "
           "max_clients (%zu on this thread) and it was the oldest",
           static_cast<unsigned long long>(c->session.id), c->addr.c_str(), max_unauthenticated_);
    CloseNow(c);
    return;
  }
}

Connection* EventLoop::Unauthenticated(const UnauthenticatedEntry& e) const {
  Connection* c = Find(e.slot, e.gen);
  // A connection that authenticated, left, or became unauthenticated again later (RESET: a newer
  // entry stands for it) is no longer this entry's.
  if (c == nullptr || c->session.authenticated || c->state != ConnState::kOpen ||
      c->accepted_ms != e.since_ms) {
    return nullptr;
  }
  return c;
}

void EventLoop::ExpireUnauthenticated() {
  // The order holds entries oldest first; those of connections that authenticated or left are
  // dropped when met, so it holds at most auth.timeout's worth of accepts.
  while (!unauthenticated_.empty()) {
    const UnauthenticatedEntry e = unauthenticated_.front();
    Connection* c = Unauthenticated(e);
    if (c != nullptr) {
      if (now_ms_ - e.since_ms <= auth_timeout_ms_) break;
      LoopStats::Add(stats_.auth_timeout_disconnections, 1);
      DQ_LOG(kWarning, "client id=%llu addr=%s closed: not authenticated within %lld s",
             static_cast<unsigned long long>(c->session.id), c->addr.c_str(),
             static_cast<long long>(auth_timeout_ms_ / 1000));
      CloseNow(c);
    }
    unauthenticated_.pop_front();
  }
}

}  // namespace deferq::net
