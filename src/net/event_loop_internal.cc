// Internal connections of an EventLoop (net/event_loop.h): commands deferq runs for itself with a
// client's identity (the console's pages and actions, net/console.h). They go through the same
// parser, dispatch, namespace gate and reply ordering as a socket's, so a page can do nothing a
// client with that identity could not, and every state change stays one function call in Redis.
#include "base/clock.h"
#include "net/event_loop.h"
#include "net/loop_host.h"

namespace deferq::net {

void EventLoop::RunInternal(const queue::Session& session, std::string_view commands,
                            InternalDone done) {
  auto conn = std::make_unique<Connection>(server_.parser_limits());
  Connection* c = conn.get();
  c->internal = true;
  c->internal_done = std::move(done);
  c->session = session;
  c->session.id = server_.NextClientId();
  c->session.peer_ip = "console";
  c->addr = "console";
  c->laddr = "console";
  c->created_ms = base::RealtimeMs();
  c->accepted_ms = now_ms_;
  c->last_active_ms = now_ms_;
  Adopt(std::move(conn));
  c->parser.Feed(commands.data(), commands.size());
  // Run at the start of the next iteration, like a connection with input left over: `done` is
  // never called from inside this call.
  resume_.emplace_back(c->slot, c->gen);
}

void EventLoop::CompleteInternal(Connection* c) {
  if (c->state == ConnState::kClosed) return;
  if (!c->pending.empty() || c->blocked || c->parser.buffered() > 0 || !c->session.replay.empty()) {
    if (c->state == ConnState::kOpen) return;  // more to come
  }
  InternalDone done = std::move(c->internal_done);
  c->internal_done = nullptr;
  const bool ok = c->state == ConnState::kOpen || c->pending.empty();
  std::string replies = std::move(c->out);
  c->out.clear();
  CloseNow(c);  // released by the tick (watched_)
  if (done) done(ok, std::move(replies), c->session);
}

}  // namespace deferq::net
