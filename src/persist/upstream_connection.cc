#include "persist/upstream_connection.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "persist/reply_reader.h"
#include "persist/upstream_tls.h"

namespace deferq::persist {

std::string FailureOf(const UpstreamResult& r) {
  if (r.reply == nullptr) return std::string(r.error);
  if (r.reply->type == REDIS_REPLY_ERROR) return std::string(r.reply->str, r.reply->len);
  return {};
}

UpstreamOutcome OutcomeOf(const UpstreamResult& r) {
  if (r.reply != nullptr) return UpstreamOutcome::kReply;
  // The texts this file (and ClusterPool's give-up, "TRYAGAIN pool ...") makes.
  if (r.error.starts_with("TRYAGAIN")) return UpstreamOutcome::kNotSent;
  if (r.error.starts_with("TIMEOUT")) return UpstreamOutcome::kTimedOut;
  if (r.error.starts_with("NOREPLICAS")) return UpstreamOutcome::kUnreplicated;
  if (r.error.starts_with("OOM ") || r.error.starts_with("MISCONF ")) {
    return UpstreamOutcome::kRefused;
  }
  return UpstreamOutcome::kUnexpected;
}

namespace {

constexpr int64_t kMinBackoffMs = 50;
constexpr int64_t kMaxBackoffMs = 2000;
// Bounded queue: past this many requests waiting on one connection, new ones fail at once
// instead of growing memory while Redis is slow.
constexpr size_t kMaxPending = 200000;
// At most this many requests of one client (one affinity) on the wire; its further ones wait in
// deferq while other clients' requests go ahead. Redis runs every command it has read before it
// writes a byte of their replies, so one client's deep pipeline of slow commands (300 reads of a
// 1 MB job: ~1 s of Redis time) would be a silence the progress timeout cannot tell from a hang,
// failing everybody's requests behind it. 32 bounds that silence to a fraction of timeout_ms. The
// cap is per client, not per connection: many clients' pipelines still reach Redis together
// (a cap of 64 per connection cost ~25% of PUBLISH throughput at 50 clients x depth 32).
constexpr uint32_t kMaxOnWirePerClient = 32;

// Whether a request may write (a script not registered no-writes): refused while the pool's
// health says writes are unsafe. Plain commands (registry reads, wake-up markers, counters of the
// rate limits and metrics) carry no job and pass.
bool MayWrite(Script script) {
  return script != Script::kCount && (kScriptFlags[static_cast<size_t>(script)] & kNoWrites) == 0;
}

}  // namespace

bool NeedsReplicaWait(Script script) {
  // A list of the exceptions, so that a new script waits until someone decides otherwise.
  return script != Script::kJob && script != Script::kPeek && script != Script::kQstat &&
         script != Script::kQstats && script != Script::kPump && script != Script::kOwn &&
         script != Script::kPumpers && script != Script::kDue && script != Script::kCount &&
         script != Script::kDeadletterRead && script != Script::kNamespaceRead &&
         script != Script::kBrowse;
}

void UpstreamConnection::SetWaitReplicas(int replicas, int timeout_ms) {
  wait_replicas_ = replicas;
  wait_timeout_ms_ = timeout_ms;
}

UpstreamConnection::UpstreamConnection(io::IoRing& io, const RedisUrl& url,
                                       const sockaddr_storage& addr, socklen_t addr_len,
                                       std::string pool_name, int timeout_ms, PoolStats* stats,
                                       std::shared_ptr<const Handshake> handshake)
    : io_(io),
      url_(url),
      addr_(addr),
      addr_len_(addr_len),
      pool_name_(std::move(pool_name)),
      unavailable_("TRYAGAIN pool '" + pool_name_ + "' unavailable"),
      timed_out_("TIMEOUT pool '" + pool_name_ +
                 "' did not answer: the command may have been applied"),
      timeout_ms_(timeout_ms),
      stats_(stats),
      handshake_(std::move(handshake)) {
  library_missing_ = unavailable_ + ": the function library was missing; it is being loaded again";
}

UpstreamConnection::~UpstreamConnection() {
  for (Held& h : held_) freeReplyObject(h.reply);
  if (fd_ >= 0) close(fd_);
  if (reader_ != nullptr) redisReaderFree(reader_);
}

void UpstreamConnection::Connect() {
  if (state_ != State::kIdle && state_ != State::kBackoff) return;
  if (source_ != nullptr) {
    generation_ = source_->generation();
    Endpoint ep;
    std::string why;
    if (!source_->Current(&ep, &why)) {
      // Nobody to connect to yet: requests answer TRYAGAIN with the reason until there is.
      refused_ = unavailable_ + ": " + why;
      Close(why, false);
      return;
    }
    addr_ = ep.addr;
    addr_len_ = ep.addr_len;
    url_.host = std::move(ep.host);
    url_.port = ep.port;
  }
  fd_ = socket(addr_.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    Fail("socket failed");
    return;
  }
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (reader_ != nullptr) redisReaderFree(reader_);
  reader_ = NewReplyReader();
  state_ = State::kConnecting;
  connect_deadline_ms_ = io_.now_ms() + timeout_ms_;
  io_uring_sqe* sqe = io_.GetSqe();
  io_uring_prep_connect(sqe, fd_, reinterpret_cast<const sockaddr*>(&addr_), addr_len_);
  io_uring_sqe_set_data64(sqe, io::ExternalTag(&connect_handler_));
  ops_++;
}

void UpstreamConnection::Send(std::string request, Script script, uint64_t affinity,
                              UpstreamCallback cb) {
  if (state_ == State::kIdle) Connect();
  if (!accepting() || pending() >= kMaxPending) {
    // Never written: safe to retry. While a check refuses the pool, say why.
    stats_->failures.fetch_add(1, std::memory_order_relaxed);
    const std::string error = refused_.empty() ? unavailable_ : refused_;
    cb(UpstreamResult{nullptr, error});
    return;
  }
  if (!writes_refused_.empty() && MayWrite(script)) {
    // The pool evicts (or did): a job written now could vanish. Never sent: safe to retry.
    stats_->failures.fetch_add(1, std::memory_order_relaxed);
    stats_->refused_policy.fetch_add(1, std::memory_order_relaxed);
    cb(UpstreamResult{nullptr, writes_refused_});
    return;
  }
  stats_->inflight.fetch_add(1, std::memory_order_relaxed);
  stats_->requests.fetch_add(1, std::memory_order_relaxed);
  Request req{std::move(request), script, std::move(cb), io_.now_ms()};
  if (stats_->record_latency) req.queued_us = base::MonotonicUs();
  req.affinity = affinity;
  req.needs_wait = wait_replicas_ > 0 && NeedsReplicaWait(script);
  ClientQueue& client = clients_[affinity];
  if (state_ == State::kReady && client.waiting.empty() && client.on_wire < kMaxOnWirePerClient) {
    Enqueue(std::move(req));
  } else {
    // Leaves when the handshake passed, or when one of the client's replies came.
    client.waiting.push_back(std::move(req));
    ++waiting_count_;
  }
}

void UpstreamConnection::TopUp(uint64_t affinity) {
  auto it = clients_.find(affinity);
  if (it == clients_.end()) return;
  ClientQueue& client = it->second;
  while (state_ == State::kReady && !client.waiting.empty() &&
         client.on_wire < kMaxOnWirePerClient) {
    Request req = std::move(client.waiting.front());
    client.waiting.pop_front();
    --waiting_count_;
    Enqueue(std::move(req));
  }
  if (client.on_wire == 0 && client.waiting.empty()) clients_.erase(it);
}

void UpstreamConnection::Enqueue(Request req) {
  // An idle connection's clock starts with its first request, not at its last reply.
  if (pending_.empty()) last_progress_ms_ = io_.now_ms();
  if (req.step < 0 && !req.wait && !req.health) ++clients_[req.affinity].on_wire;
  if (req.needs_wait) ++unwaited_writes_;
  req.offset = stream_bytes_;
  stream_bytes_ += req.request.size();
  out_.append(req.request);
  req.request.clear();  // on the wire: nothing is ever sent again
  pending_.push_back(std::move(req));
}

void UpstreamConnection::Flush() {
  // A WAIT blocks this connection in Redis for up to its timeout: silence is expected meanwhile.
  const int64_t allowed = timeout_ms_ + (waits_pending_ > 0 ? wait_timeout_ms_ : 0);
  if ((state_ == State::kReady || state_ == State::kHandshake) && !pending_.empty() &&
      io_.now_ms() - last_progress_ms_ > allowed) {
    Fail("no reply for " + std::to_string(io_.now_ms() - last_progress_ms_) + " ms");
    return;
  }
  Write();
}

void UpstreamConnection::Write() {
  if ((state_ != State::kReady && state_ != State::kHandshake) || send_inflight_) return;
  if (send_off_ == sending_.size()) {
    sending_.clear();
    send_off_ = 0;
    // The writes gathered since the last send leave with one WAIT behind them.
    if (unwaited_writes_ > 0) AppendWait();
    if (tls_ != nullptr) {
      if (!out_.empty() && !tls_->Write(out_)) return Fail(tls_->error());
      sent_bytes_ += out_.size();
      out_.clear();
      tls_->TakeOutput(&sending_);
      if (sending_.empty()) return;
    } else {
      if (out_.empty()) return;
      std::swap(out_, sending_);
    }
  }
  io_uring_sqe* sqe = io_.GetSqe();
  io_uring_prep_send(sqe, fd_, sending_.data() + send_off_, sending_.size() - send_off_,
                     MSG_NOSIGNAL);
  io_uring_sqe_set_data64(sqe, io::ExternalTag(&send_handler_));
  send_inflight_ = true;
  ops_++;
}

void UpstreamConnection::AppendWait() {
  Request wait;
  AppendCommand(&wait.request,
                {"WAIT", std::to_string(wait_replicas_), std::to_string(wait_timeout_ms_)});
  wait.wait = true;
  wait.queued_ms = io_.now_ms();
  Enqueue(std::move(wait));
  unwaited_writes_ = 0;
  ++waits_pending_;
}

void UpstreamConnection::ReleaseHeld(const redisReply* wait_reply) {
  std::string error;
  if (wait_reply == nullptr) {
    error = "NOREPLICAS pool '" + pool_name_ +
            "' lost the connection before WAIT answered: the command was applied on the master "
            "but may be lost in a failover";
  } else if (wait_reply->type != REDIS_REPLY_INTEGER || wait_reply->integer < wait_replicas_) {
    const std::string got =
        wait_reply->type == REDIS_REPLY_INTEGER
            ? std::to_string(wait_reply->integer)
            : "WAIT failed (" +
                  std::string(wait_reply->type == REDIS_REPLY_ERROR
                                  ? std::string_view(wait_reply->str, wait_reply->len)
                                  : "unexpected reply") +
                  "), 0";
    error = "NOREPLICAS pool '" + pool_name_ + "': " + got + " of " +
            std::to_string(wait_replicas_) + " replica(s) confirmed the write within " +
            std::to_string(wait_timeout_ms_) +
            " ms: it was applied on the master but may be lost in a failover";
  }
  // Callbacks may fail the connection, which must find nothing held any more.
  std::deque<Held> batch;
  batch.swap(held_);
  for (Held& h : batch) {
    if (error.empty()) {
      h.req.cb(UpstreamResult{h.reply, {}});
    } else {
      stats_->unreplicated.fetch_add(1, std::memory_order_relaxed);
      h.req.cb(UpstreamResult{nullptr, error});
    }
    freeReplyObject(h.reply);
  }
}

void UpstreamConnection::ArmRecv() {
  io_uring_sqe* sqe = io_.GetSqe();
  io_uring_prep_recv_multishot(sqe, fd_, nullptr, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = io_.buffers().group();
  io_uring_sqe_set_data64(sqe, io::ExternalTag(&recv_handler_));
  recv_armed_ = true;
  ops_++;
}

void UpstreamConnection::OpHandler::OnCompletion(const io_uring_cqe& cqe) {
  UpstreamConnection* c = owner;
  switch (op) {
    case kConnectOp:
      c->ops_--;
      c->OnConnect(cqe.res);
      break;
    case kRecvOp:
      c->OnRecv(cqe);
      break;
    case kSendOp:
      c->ops_--;
      c->send_inflight_ = false;
      c->OnSend(cqe.res);
      break;
  }
  if (c->state_ == State::kClosing && c->ops_ == 0) {
    // Every operation on the old socket has reported back: the fd can go, and the connection
    // waits out its backoff before the next attempt.
    close(c->fd_);
    c->fd_ = -1;
    c->state_ = State::kBackoff;
  }
}

void UpstreamConnection::OnConnect(int res) {
  if (state_ != State::kConnecting) return;
  if (res < 0) {
    Fail(strerror(-res));
    return;
  }
  tls_.reset();
  if (url_.tls) {
    std::shared_ptr<io::TlsContext> context = UpstreamTls();
    if (context == nullptr) {
      Fail("TLS is not set up (rediss:// needs the [tls] upstream settings)");
      return;
    }
    // The certificate must carry the configured host (a name, or an address checked as one);
    // a Cluster node or a Sentinel's master is reached by the address it announces.
    tls_ = std::make_unique<io::TlsStream>(std::move(context), url_.host);
  }
  // The handshake goes out pipelined; nothing else is sent before its last reply passed.
  state_ = State::kHandshake;
  stream_bytes_ = 0;
  sent_bytes_ = 0;
  setup_sent_ = 0;
  library_present_ = false;
  ArmRecv();
  SendSetupSteps();
}

void UpstreamConnection::SendSetupSteps() {
  // The library load is passed over when a check found the library there already. It starts a
  // batch of its own (after_checks), so every check before it has answered.
  if (setup_sent_ < handshake_->size() && (*handshake_)[setup_sent_].loads_library &&
      library_present_) {
    ++setup_sent_;
  }
  if (setup_sent_ == handshake_->size()) {
    FinishHandshake();
    return;
  }
  // Up to the next step that must wait for the ones before it.
  const size_t first = setup_sent_;
  while (setup_sent_ < handshake_->size() &&
         (setup_sent_ == first || !(*handshake_)[setup_sent_].after_checks)) {
    Request step;
    step.request = (*handshake_)[setup_sent_].request;
    step.step = static_cast<int>(setup_sent_);
    step.queued_ms = io_.now_ms();
    Enqueue(std::move(step));
    ++setup_sent_;
  }
  Write();
}

void UpstreamConnection::FinishHandshake() {
  state_ = State::kReady;
  if (stats_->connections_up.fetch_add(1, std::memory_order_relaxed) == 0) {
    DQ_LOG(kInfo, "pool '%s' is up (%s:%u)", pool_name_.c_str(), url_.host.c_str(), url_.port);
  }
  if (ever_up_) stats_->reconnects.fetch_add(1, std::memory_order_relaxed);
  ever_up_ = true;
  backoff_ms_ = 0;
  reported_down_ = false;
  refused_.clear();
  if (stats_->refused.exchange(false, std::memory_order_relaxed)) {
    DQ_LOG(kInfo, "pool '%s' (%s:%u) passes its checks now; serving it again", pool_name_.c_str(),
           url_.host.c_str(), url_.port);
  }
  DQ_LOG(kInfo, "pool '%s' connection up (%s:%u)", pool_name_.c_str(), url_.host.c_str(),
         url_.port);
  // The first health reading goes ahead of the traffic: its evicted_keys is the baseline.
  evicted_keys_ = -1;
  if (!push_handler_) SendHealthCheck();
  if (on_connect_) on_connect_();
  std::vector<uint64_t> waiting;
  for (const auto& [affinity, client] : clients_) waiting.push_back(affinity);
  for (uint64_t affinity : waiting) TopUp(affinity);
  Write();
}

void UpstreamConnection::OnRecv(const io_uring_cqe& cqe) {
  const bool more = cqe.flags & IORING_CQE_F_MORE;
  if (!more) {
    recv_armed_ = false;
    ops_--;
  }
  const bool open = state_ == State::kReady || state_ == State::kHandshake;
  if (cqe.res > 0) {
    const auto bid = static_cast<uint16_t>(cqe.flags >> IORING_CQE_BUFFER_SHIFT);
    bool tls_ok = true;
    if (open) {
      if (tls_ == nullptr) {
        redisReaderFeed(reader_, io_.buffers().Buffer(bid), static_cast<size_t>(cqe.res));
      } else {
        tls_plain_.clear();
        tls_ok =
            tls_->Receive(io_.buffers().Buffer(bid), static_cast<size_t>(cqe.res), &tls_plain_);
        if (!tls_plain_.empty()) redisReaderFeed(reader_, tls_plain_.data(), tls_plain_.size());
      }
      last_progress_ms_ = io_.now_ms();
    }
    io_.buffers().Recycle(bid);
    if (!tls_ok) return Fail(tls_->error());
    if (open) DeliverReplies();
    // The handshake's next flight, or requests sealed once it completed.
    if (tls_ != nullptr && tls_->has_output()) Write();
    if (!more && (state_ == State::kReady || state_ == State::kHandshake)) ArmRecv();
    return;
  }
  if (cqe.res == -ENOBUFS) {
    if (!more && open) ArmRecv();
    return;
  }
  if (open) Fail(cqe.res == 0 ? "connection closed by Redis" : strerror(-cqe.res));
}

void UpstreamConnection::DeliverReplies() {
  for (;;) {
    void* obj = nullptr;
    if (redisReaderGetReply(reader_, &obj) != REDIS_OK) {
      Fail("protocol error from Redis");
      return;
    }
    if (obj == nullptr) return;
    auto* reply = static_cast<redisReply*>(obj);
    if (pending_.empty() && push_handler_) {
      push_handler_(reply);
      freeReplyObject(reply);
      continue;
    }
    if (pending_.empty()) {
      freeReplyObject(reply);
      Fail("reply without a request");
      return;
    }
    Request req = std::move(pending_.front());
    pending_.pop_front();
    if (req.wait) {
      --waits_pending_;
      ReleaseHeld(reply);
      freeReplyObject(reply);
      if (state_ != State::kReady) return;
      continue;
    }
    if (req.health) {
      health_inflight_ = false;
      OnHealth(*reply);
      freeReplyObject(reply);
      continue;
    }
    if (req.step >= 0) {
      const SetupVerdict v = (*handshake_)[req.step].check(*reply);
      freeReplyObject(reply);
      if (v.kind == SetupVerdict::kRefuse) {
        Refuse(v.text);
        return;
      }
      if (v.library_present) library_present_ = true;
      if (v.kind == SetupVerdict::kWarn && !stats_->warned.exchange(true)) {
        DQ_LOG(kWarning, "pool '%s' (%s:%u): %s", pool_name_.c_str(), url_.host.c_str(), url_.port,
               v.text.c_str());
      }
      // The last reply of what was sent: the next batch, or traffic.
      if (static_cast<size_t>(req.step) + 1 == setup_sent_) SendSetupSteps();
      continue;
    }
    stats_->inflight.fetch_sub(1, std::memory_order_relaxed);
    stats_->latency_us.store((io_.now_ms() - req.queued_ms) * 1000, std::memory_order_relaxed);
    if (req.queued_us != 0) stats_->latency.Record(base::MonotonicUs() - req.queued_us);
    // One of the client's requests left the wire: the next one it has waiting may go. Before the
    // callback, which may fail the connection and drop the client table.
    --clients_[req.affinity].on_wire;
    TopUp(req.affinity);
    if (reply->type == REDIS_REPLY_ERROR && req.script != Script::kCount &&
        std::string_view(reply->str, reply->len).starts_with("ERR Function not found")) {
      // The library went away under this connection (FUNCTION FLUSH or DELETE): nothing was
      // applied, so the command may be retried; the library is loaded again at once.
      freeReplyObject(reply);
      ReloadLibrary();
      req.cb(UpstreamResult{nullptr, library_missing_});
      if (state_ != State::kReady) return;
      continue;
    }
    if (source_ != nullptr && reply->type == REDIS_REPLY_ERROR &&
        std::string_view(reply->str, reply->len).starts_with("READONLY")) {
      // The master was demoted under this connection: nothing was applied. Leave it, and have
      // the Sentinels asked where the master is now.
      freeReplyObject(reply);
      const std::string demoted = unavailable_ + ": the node is no longer the master";
      stats_->failures.fetch_add(1, std::memory_order_relaxed);
      req.cb(UpstreamResult{nullptr, demoted});
      if (state_ == State::kReady) Fail("the node is no longer the master (READONLY)");
      return;
    }
    if (std::string refusal; NoteRedisRefusal(*reply, req.script, &refusal)) {
      // OOM or MISCONF: nothing was applied; the client learns which pool and why.
      freeReplyObject(reply);
      req.cb(UpstreamResult{nullptr, refusal});
      if (state_ != State::kReady) return;
      continue;
    }
    if (req.needs_wait && reply->type != REDIS_REPLY_ERROR) {
      // Applied; answered once the batch's WAIT says enough replicas have it. (An error reply
      // changed nothing and goes at once.)
      held_.push_back(Held{std::move(req), reply});
      continue;
    }
    req.cb(UpstreamResult{reply, {}});
    freeReplyObject(reply);
    if (state_ != State::kReady) return;  // a callback may have failed the connection
  }
}

void UpstreamConnection::OnSend(int res) {
  if (state_ != State::kReady && state_ != State::kHandshake) return;
  if (res < 0) {
    Fail(strerror(-res));
    return;
  }
  send_off_ += static_cast<size_t>(res);
  if (tls_ == nullptr) sent_bytes_ += static_cast<uint64_t>(res);
  Write();
}

void UpstreamConnection::Tick() {
  const int64_t now = io_.now_ms();
  if (source_ != nullptr && !stopping_ && source_->generation() != generation_ &&
      state_ != State::kClosing) {
    // The address moved (a failover): leave the old one now, and go to the new one at once.
    if (accepting()) Fail("the address moved to another node");
    backoff_ms_ = 0;
    next_attempt_ms_ = now;
    generation_ = source_->generation();
  }
  if (state_ == State::kBackoff && now >= next_attempt_ms_) {
    Connect();
    return;
  }
  if (state_ == State::kReady && !push_handler_ && !health_inflight_ && now >= next_health_ms_) {
    SendHealthCheck();
  }
  if (state_ == State::kConnecting && now > connect_deadline_ms_) {
    Fail("connect timed out");
  }
}

void UpstreamConnection::Fail(std::string_view why) {
  refused_.clear();  // the newest news is that Redis cannot be reached, not what it said before
  if (source_ != nullptr && !stopping_) source_->Suspect();
  Close(why, true);
}

void UpstreamConnection::Refuse(std::string_view reason) {
  refused_ = unavailable_ + ": " + std::string(reason);
  if (source_ != nullptr) source_->Suspect();
  if (!stats_->refused.exchange(true, std::memory_order_relaxed)) {
    DQ_LOG(kError,
           "pool '%s' (%s:%u) refused: %.*s; its commands answer TRYAGAIN until a "
           "reconnect passes the checks",
           pool_name_.c_str(), url_.host.c_str(), url_.port, static_cast<int>(reason.size()),
           reason.data());
  }
  Close(reason, false);
}

void UpstreamConnection::Close(std::string_view why, bool log) {
  // One line per transition: when an established connection drops, or the first failed
  // attempt after being up; retries while Redis stays away are quiet.
  if (log && !stopping_ && (state_ == State::kReady || !reported_down_)) {
    DQ_LOG(kWarning, "pool '%s' connection down (%s:%u): %.*s; %zu request(s) failed",
           pool_name_.c_str(), url_.host.c_str(), url_.port, static_cast<int>(why.size()),
           why.data(), pending());
  }
  reported_down_ = true;
  if (state_ == State::kReady &&
      stats_->connections_up.fetch_sub(1, std::memory_order_relaxed) == 1 && !stopping_) {
    DQ_LOG(kWarning, "pool '%s' is down: no connection up (%s:%u: %.*s)", pool_name_.c_str(),
           url_.host.c_str(), url_.port, static_cast<int>(why.size()), why.data());
  }
  backoff_ms_ = backoff_ms_ == 0 ? kMinBackoffMs : std::min(backoff_ms_ * 2, kMaxBackoffMs);
  next_attempt_ms_ = io_.now_ms() + backoff_ms_;
  // Everything below this offset was handed to the kernel, or may be by the send in flight.
  // (With TLS, sent_bytes_ already counts every request sealed.)
  const uint64_t written =
      sent_bytes_ + (send_inflight_ && tls_ == nullptr ? sending_.size() - send_off_ : 0);
  CloseSocket();
  // Callbacks may queue new requests; they fail at once since the state is no longer ready.
  std::deque<Request> failed;
  failed.swap(pending_);
  std::unordered_map<uint64_t, ClientQueue> clients;
  clients.swap(clients_);
  waiting_count_ = 0;
  out_.clear();
  health_inflight_ = false;
  SetWritesRefused({});  // a new connection reads the pool's health again
  unwaited_writes_ = 0;
  waits_pending_ = 0;
  ReleaseHeld(nullptr);
  const std::string unavailable = refused_.empty() ? unavailable_ : refused_;
  for (Request& r : failed) {
    if (r.step >= 0 || r.wait || r.health) continue;  // these have no caller
    stats_->inflight.fetch_sub(1, std::memory_order_relaxed);
    if (r.offset < written) {
      stats_->timeouts.fetch_add(1, std::memory_order_relaxed);
      r.cb(UpstreamResult{nullptr, timed_out_});
    } else {
      stats_->failures.fetch_add(1, std::memory_order_relaxed);
      r.cb(UpstreamResult{nullptr, unavailable});
    }
  }
  for (auto& [affinity, client] : clients) {
    for (Request& r : client.waiting) {
      stats_->inflight.fetch_sub(1, std::memory_order_relaxed);
      stats_->failures.fetch_add(1, std::memory_order_relaxed);
      r.cb(UpstreamResult{nullptr, unavailable});
    }
  }
}

void UpstreamConnection::CloseSocket() {
  if (fd_ < 0) {
    state_ = State::kBackoff;
    return;
  }
  // shutdown() completes the armed recv and any send in flight; the fd is closed when they
  // have reported back (OpHandler::OnCompletion).
  shutdown(fd_, SHUT_RDWR);
  state_ = State::kClosing;
  sending_.clear();
  send_off_ = 0;
  if (ops_ == 0) {
    close(fd_);
    fd_ = -1;
    state_ = State::kBackoff;
  }
}

void UpstreamConnection::Shutdown() {
  stopping_ = true;  // closing on purpose: no "connection down" line
  if (accepting()) Fail("server stopping");
  next_attempt_ms_ = INT64_MAX;
}

void UpstreamConnection::ReloadLibrary() {
  if (reloading_library_) return;
  reloading_library_ = true;
  DQ_LOG(kWarning, "pool '%s' (%s:%u): the function library is missing; loading it again",
         pool_name_.c_str(), url_.host.c_str(), url_.port);
  std::string load;
  AppendCommand(&load, {"FUNCTION", "LOAD", "REPLACE", GetLibrary().body});
  Send(std::move(load), Script::kCount, 0,
       [this](const UpstreamResult&) { reloading_library_ = false; });
}

void UpstreamConnection::SendHealthCheck() {
  Request check;
  check.request = HealthRequest();
  check.health = true;
  check.queued_ms = io_.now_ms();
  health_inflight_ = true;
  next_health_ms_ = io_.now_ms() + kHealthCheckMs;
  Enqueue(std::move(check));
}

void UpstreamConnection::OnHealth(const redisReply& reply) {
  SetWritesRefused(WriteRefusal(reply, &evicted_keys_));
}

void UpstreamConnection::SetWritesRefused(std::string reason) {
  const bool was = !writes_refused_.empty();
  writes_refused_ = reason.empty() ? std::string() : unavailable_ + ": " + reason;
  if (was == !reason.empty()) return;
  if (!reason.empty()) {
    if (stats_->refusing_writes.fetch_add(1, std::memory_order_relaxed) == 0) {
      DQ_LOG(kError, "pool '%s' (%s:%u) refuses writes (TRYAGAIN), reads go on: %s",
             pool_name_.c_str(), url_.host.c_str(), url_.port, reason.c_str());
    }
  } else if (stats_->refusing_writes.fetch_sub(1, std::memory_order_relaxed) == 1 && !stopping_ &&
             state_ == State::kReady) {
    DQ_LOG(kInfo, "pool '%s' (%s:%u) is safe to write again (noeviction, no key evicted)",
           pool_name_.c_str(), url_.host.c_str(), url_.port);
  }
}

bool UpstreamConnection::NoteRedisRefusal(const redisReply& reply, Script script,
                                          std::string* error) {
  const unsigned flags = script == Script::kCount ? 0 : kScriptFlags[static_cast<size_t>(script)];
  if (reply.type != REDIS_REPLY_ERROR) {
    // A write went through: Redis persists again (MISCONF refuses every write); one that needed
    // memory went through: the pool has room again.
    if (MayWrite(script) && stats_->cannot_persist.load(std::memory_order_relaxed) &&
        stats_->cannot_persist.exchange(false)) {
      DQ_LOG(kInfo, "pool '%s' (%s:%u) persists again: writes are accepted", pool_name_.c_str(),
             url_.host.c_str(), url_.port);
    }
    if (MayWrite(script) && (flags & kAllowOom) == 0 &&
        stats_->out_of_memory.load(std::memory_order_relaxed) &&
        stats_->out_of_memory.exchange(false)) {
      DQ_LOG(kInfo, "pool '%s' (%s:%u) has memory again: publishes are accepted",
             pool_name_.c_str(), url_.host.c_str(), url_.port);
    }
    return false;
  }
  const std::string_view text(reply.str, reply.len);
  if (text.starts_with("OOM ")) {
    stats_->refused_oom.fetch_add(1, std::memory_order_relaxed);
    if (!stats_->out_of_memory.exchange(true)) {
      DQ_LOG(kError,
             "pool '%s' (%s:%u) is full (used memory over maxmemory): publishes answer OOM "
             "until consumers free memory or maxmemory is raised; consume, ack and reads go on",
             pool_name_.c_str(), url_.host.c_str(), url_.port);
    }
    *error = "OOM pool '" + pool_name_ +
             "' is full (used memory over maxmemory): the command was not applied; consuming, "
             "acking or purging jobs frees memory";
    return true;
  }
  if (text.starts_with("MISCONF ")) {
    stats_->refused_misconf.fetch_add(1, std::memory_order_relaxed);
    if (!stats_->cannot_persist.exchange(true)) {
      DQ_LOG(kError,
             "pool '%s' (%s:%u) cannot persist (%.*s): every write answers MISCONF until it can; "
             "reads go on",
             pool_name_.c_str(), url_.host.c_str(), url_.port, static_cast<int>(text.size()),
             text.data());
    }
    *error = "MISCONF pool '" + pool_name_ +
             "' cannot persist to disk, so it refuses writes (reads still work): the command "
             "was not applied (Redis: " +
             std::string(text.substr(8)) + ")";
    return true;
  }
  return false;
}

}  // namespace deferq::persist
