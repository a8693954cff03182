// Reply ordering of an EventLoop (net/event_loop.h), its queue::ClientPort side: a command that
// answers later reserves its place (Defer), later pipelined replies wait behind it, and each
// connection's finished replies are written in order (Begin, Finish) at the end of the loop's
// iteration (MarkDirty, FlushDirty). Sending is event_loop.cc's.
#include "base/log.h"
#include "net/event_loop.h"
#include "net/loop_host.h"

namespace deferq::net {

queue::ReplyTicket EventLoop::Defer(bool blocking) {
  Connection* c = running_;
  running_deferred_ = true;
  const uint64_t seq = c->next_seq++;
  c->pending.push_back(PendingReply{seq,
                                    false,
                                    blocking,
                                    c->session.resp,
                                    {},
                                    running_ctx_ ? running_ctx_->spec : nullptr,
                                    running_start_us_});
  if (blocking) c->blocked = true;
  return queue::ReplyTicket{c->slot, c->gen, seq, c->session.id};
}

proto::ReplyWriter* EventLoop::Begin(const queue::ReplyTicket& t) {
  Connection* c = t.slot < conns_.size() ? conns_[t.slot].get() : nullptr;
  if (c == nullptr || c->gen != t.gen || c->state == ConnState::kClosed) return nullptr;
  for (PendingReply& p : c->pending) {
    if (p.seq == t.seq) {
      begin_writer_ = proto::ReplyWriter(&p.data, p.resp);
      return &begin_writer_;
    }
  }
  return nullptr;
}

void EventLoop::Finish(const queue::ReplyTicket& t) {
  Connection* c = t.slot < conns_.size() ? conns_[t.slot].get() : nullptr;
  if (c == nullptr || c->gen != t.gen || c->state == ConnState::kClosed) return;
  for (PendingReply& p : c->pending) {
    if (p.seq == t.seq) {
      p.done = true;
      if (p.blocking) c->blocked = false;
      if (timed_) CommandDone(c, p.spec, p.start_us, p.data, p.blocking);
      break;
    }
  }
  // Replies leave in request order: move every finished reply at the front to the output.
  while (!c->pending.empty() && c->pending.front().done) {
    c->out.append(c->pending.front().data);
    c->pending.pop_front();
  }
  if (c->PendingOutput() > server_.config().max_output_buffer) {
    DQ_LOG(kWarning, "client id=%llu addr=%s dropped: output buffer over %llu bytes",
           static_cast<unsigned long long>(c->session.id), c->addr.c_str(),
           static_cast<unsigned long long>(server_.config().max_output_buffer));
    LoopStats::Add(stats_.output_limit_disconnections, 1);
    CloseNow(c);
    ReleaseIfDone(c);
    return;
  }
  MarkDirty(c);
  // Commands that waited behind a blocking reply or a full pipeline can run now; they run at the
  // end of this loop iteration, never from inside another connection's command.
  if (!c->in_process && c->state == ConnState::kOpen && !c->blocked &&
      c->pending.size() < kMaxPendingReplies &&
      (c->parser.buffered() > 0 || !c->session.replay.empty())) {
    resume_.emplace_back(c->slot, c->gen);
  }
}

bool EventLoop::Connected(const queue::ReplyTicket& t) const {
  const Connection* c = t.slot < conns_.size() ? conns_[t.slot].get() : nullptr;
  return c != nullptr && c->gen == t.gen && c->state != ConnState::kClosed;
}

void EventLoop::MarkDirty(Connection* c) {
  if (c->dirty || c->out.empty()) return;
  c->dirty = true;
  dirty_.emplace_back(c->slot, c->gen);
}

void EventLoop::FlushDirty() {
  // Sends start once per loop iteration, so all replies produced by one batch of completions
  // leave in one write per connection.
  for (auto [slot, gen] : dirty_) {
    Connection* c = conns_[slot].get();
    if (c == nullptr || c->gen != gen) continue;
    c->dirty = false;
    StartSend(c);
  }
  dirty_.clear();
}

}  // namespace deferq::net
