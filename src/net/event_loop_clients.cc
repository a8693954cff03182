// The client registry's side of an EventLoop (net/event_loop.h): CLIENT LIST, CLIENT KILL and
// INFO clients read every loop's connections, each loop its own, through a ClientsFanout
// (net/clients_query.h); this file is that part of the loop, the rest of it is event_loop.cc.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "base/clock.h"
#include "net/clients_query.h"
#include "net/event_loop.h"
#include "net/loop_host.h"

namespace deferq::net {

using base::MonotonicMs;
using base::RealtimeMs;

void EventLoop::FormatClient(const Connection& c, int64_t now_ms, std::string* out) const {
  // The field set of Redis 7's CLIENT LIST (fields deferq has no use for are constant), plus the
  // namespace as user=.
  char buf[512];
  const int64_t idle_ms = now_ms - c.last_active_ms;
  const int64_t age_s = (RealtimeMs() - c.created_ms) / 1000;
  const char* flags = c.state == ConnState::kOpen ? "N" : "c";
  int n = snprintf(buf, sizeof(buf),
                   "id=%llu addr=%s laddr=%s fd=%d name=%s age=%lld idle=%lld flags=%s db=0 "
                   "sub=0 psub=0 ssub=0 multi=-1 qbuf=%zu qbuf-free=0 argv-mem=0 multi-mem=0 "
                   "rbs=0 rbp=0 obl=%llu oll=0 omem=%llu tot-mem=0 events=r cmd=%s user=%s "
                   "redir=-1 resp=%d",
                   static_cast<unsigned long long>(c.session.id), c.addr.c_str(), c.laddr.c_str(),
                   c.fd, c.session.name.c_str(), static_cast<long long>(age_s),
                   static_cast<long long>(idle_ms / 1000), flags, c.parser.buffered(),
                   static_cast<unsigned long long>(c.PendingOutput()),
                   static_cast<unsigned long long>(c.PendingOutput()), c.last_cmd,
                   c.session.ns.c_str(), c.session.resp);
  if (n > 0) out->append(buf, std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1));
}

void EventLoop::StartClientsQuery(queue::ClientsQuery query, queue::ClientsDone done) {
  if (queries_in_flight_ >= Mailbox::kMaxQueriesInFlight) {
    // The bound that keeps every mailbox lane bounded (mailbox.h); the client may retry.
    queue::ClientsReport busy;
    busy.error = "ERR too many CLIENT LIST/KILL or INFO requests in flight, try again";
    done(busy);
    return;
  }
  ++queries_in_flight_;
  const int loops = server_.threads();
  auto fanout = std::make_shared<ClientsFanout>(std::move(query), index_, loops, std::move(done));
  // This loop's own part first, while the command runs: CLIENT KILL of the caller itself marks
  // the connection that is running.
  AnswerClientsQuery(fanout->query(), &fanout->part(index_));
  ArriveClientsQuery(fanout);
  for (int i = 0; i < loops; ++i) {
    if (i == index_) continue;
    const Mailbox::PostResult posted =
        server_.loop(i).mailbox().PostRequest([fanout, i](EventLoop& loop) {
          loop.AnswerClientsQuery(fanout->query(), &fanout->part(i));
          loop.ArriveClientsQuery(fanout);
        });
    if (posted == Mailbox::PostResult::kPosted) continue;
    // Refused: that loop has stopped (its clients are gone: its part is empty), or its lane is
    // over the bound, which cannot happen while every loop keeps kMaxQueriesInFlight; the reply
    // is then an error rather than a partial answer.
    if (posted == Mailbox::PostResult::kFull) {
      fanout->part(i).error = "ERR thread mailbox full, try again";
    }
    ArriveClientsQuery(fanout);
  }
}

void EventLoop::ArriveClientsQuery(const std::shared_ptr<ClientsFanout>& fanout) {
  if (!fanout->Arrive()) return;
  server_.loop(fanout->origin()).mailbox().PostAnswer([fanout](EventLoop& origin) {
    --origin.queries_in_flight_;
    fanout->Complete();
  });
}

void EventLoop::AnswerClientsQuery(const queue::ClientsQuery& query, queue::ClientsReport* part) {
  const int64_t now = MonotonicMs();
  const queue::ClientsQuery::Filter& f = query.filter;
  for (auto& owned : conns_) {
    Connection* c = owned.get();
    if (c == nullptr || c->state == ConnState::kClosed || c->internal) continue;
    switch (query.kind) {
      case queue::ClientsQuery::Kind::kList:
        if ((f.id && *f.id != c->session.id) ||
            (f.bound_ns &&
             (!c->session.authenticated || c->session.admin || c->session.ns != *f.bound_ns))) {
          break;
        }
        FormatClient(*c, now, &part->list);
        part->list.push_back('\n');
        break;
      case queue::ClientsQuery::Kind::kCount:
        part->connected++;
        if (c->blocked) part->blocked++;
        part->max_input_buffer = std::max<uint64_t>(part->max_input_buffer, c->parser.buffered());
        part->max_output_buffer = std::max<uint64_t>(part->max_output_buffer, c->PendingOutput());
        break;
      case queue::ClientsQuery::Kind::kKill: {
        if (f.none || (f.id && *f.id != c->session.id) || (f.addr && *f.addr != c->addr) ||
            (f.laddr && *f.laddr != c->laddr) || (f.user && *f.user != c->session.ns)) {
          break;
        }
        const bool is_caller = c->session.id == query.caller_id;
        if (is_caller && f.skip_me) break;
        part->killed++;
        if (is_caller) {
          // As Redis does: the caller gets its reply, then its connection closes.
          c->session.close_after_reply = true;
        } else {
          CloseNow(c);
          ReleaseIfDone(c);  // may free the slot: `c` is not used after this
        }
        break;
      }
    }
  }
}

bool EventLoop::DescribeOwnClient(uint64_t id, std::string* out) const {
  const int64_t now = MonotonicMs();
  for (const auto& c : conns_) {
    if (c != nullptr && c->session.id == id) {
      FormatClient(*c, now, out);
      return true;
    }
  }
  return false;
}

}  // namespace deferq::net
