#include "net/event_loop.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/ascii.h"
#include "base/check.h"
#include "base/clock.h"
#include "base/histogram.h"
#include "base/log.h"
#include "config/load.h"
#include "net/listener.h"
#include "net/loop_host.h"
#include "proto/reply_writer.h"
#include "queue/commands/commands.h"

namespace deferq::net {

using base::MonotonicMs;
using base::RealtimeMs;

namespace {

// Receive buffers: 512 x 16 KiB per thread. A buffer is handed back as soon as its bytes are
// copied into the connection's parser, so this bounds bytes in flight, not connections.
constexpr uint32_t kRecvBuffers = 512;
constexpr uint32_t kRecvBufferSize = 16 * 1024;
constexpr uint16_t kBufferGroup = 0;
constexpr unsigned kSqEntries = 4096;
constexpr unsigned kCqEntries = 16 * 4096;
constexpr int64_t kTickMs = 100;
constexpr int64_t kLingerMs = 2000;         // wait for the peer's EOF after our last reply
constexpr int64_t kShutdownLingerMs = 300;  // shorter while the server stops
constexpr int64_t kShutdownDrainMs = 5000;  // then everything still open is dropped
// A send buffer that grew past this is given back once it has been written.
constexpr size_t kKeepBufferBytes = 256 * 1024;

}  // namespace

// The eventfd and the mailbox exist before any loop thread starts, so a loop that starts serving
// first can already post to one still setting up (the post waits in the mailbox).
EventLoop::EventLoop(LoopHost& server, int index)
    : server_(server),
      index_(index),
      wake_fd_(eventfd(0, EFD_CLOEXEC)),
      auth_gate_(server.config().auth_required),
      max_unauthenticated_(std::max<size_t>(
          1, server.config().max_clients / 4 / static_cast<size_t>(std::max(1, server.threads())))),
      auth_timeout_ms_(int64_t{server.config().auth_timeout} * 1000),
      metrics_(server.metrics_enabled()),
      slowlog_us_(int64_t{server.config().slowlog_ms} * 1000),
      timed_(metrics_ || slowlog_us_ > 0),
      mailbox_(std::make_unique<Mailbox>(wake_fd_, server.threads())) {}

EventLoop::~EventLoop() {
  for (auto& c : conns_) {
    if (c && c->fd >= 0) close(c->fd);
  }
  for (const Listening& l : listeners_) {
    if (l.fd >= 0) close(l.fd);
  }
  if (wake_fd_ >= 0) close(wake_fd_);
  if (ring_ready_) io_uring_queue_exit(&ring_);
}

bool EventLoop::Init(std::string* error) {
  // Prefer the flags that suit one thread per ring: SINGLE_ISSUER + DEFER_TASKRUN run completion
  // work only when this thread asks for events. Older kernels get the plainer setups.
  const unsigned flag_sets[] = {
      IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
      IORING_SETUP_CQSIZE | IORING_SETUP_COOP_TASKRUN,
      IORING_SETUP_CQSIZE,
  };
  int ret = -EINVAL;
  for (unsigned flags : flag_sets) {
    io_uring_params p;
    memset(&p, 0, sizeof(p));
    p.flags = flags;
    p.cq_entries = kCqEntries;
    ret = io_uring_queue_init_params(kSqEntries, &ring_, &p);
    if (ret == 0 || ret == -EPERM || ret == -ENOSYS) break;
  }
  if (ret == -EPERM || ret == -ENOSYS) {
    *error = std::string("io_uring is not available (") + (ret == -EPERM ? "EPERM" : "ENOSYS") +
             "): the kernel or a seccomp policy (containers often) refuses it; deferq needs "
             "io_uring (Linux 6.x, kernel.io_uring_disabled=0)";
    return false;
  }
  if (ret < 0) {
    *error = std::string("io_uring setup failed: ") + strerror(-ret);
    return false;
  }
  ring_ready_ = true;
  if (!buffers_.Init(&ring_, kBufferGroup, kRecvBuffers, kRecvBufferSize, error)) return false;

  const Config& cfg = server_.config();
  listeners_[kPlain].fd = OpenListener(cfg.listen_host, cfg.listen_port, error);
  if (listeners_[kPlain].fd < 0) return false;
  if (cfg.tls_listen_port != 0) {
    listeners_[kTls].fd = OpenListener(cfg.tls_listen_host, cfg.tls_listen_port, error);
    if (listeners_[kTls].fd < 0) return false;
  }
  if (wake_fd_ < 0) {
    *error = std::string("eventfd failed: ") + strerror(errno);
    return false;
  }
  now_ms_ = MonotonicMs();
  wall_ms_ = RealtimeMs();
  next_idle_scan_ms_ = now_ms_ + 1000;
  std::vector<std::unique_ptr<persist::PoolClient>> pools;
  for (const persist::ResolvedPool& pool : server_.pools()) {
    pools.push_back(std::make_unique<persist::RedisPool>(*this, pool));
  }
  service_ = queue::NewService({.config = server_.config(),
                                .server = server_,
                                .peers = server_,
                                .instance = server_.instance(),
                                .port = *this,
                                .thread_index = index_,
                                .threads = server_.threads(),
                                .max_exported_queues = server_.config().metrics_max_queues},
                               std::move(pools), now_ms_, wall_ms_);
  ArmAccepts();
  ArmWake();
  ArmTimer();
  if (index_ == 0 && server_.metrics_enabled()) {
    http_ = std::make_unique<HttpListener>(
        *this, server_,
        [this](const queue::Session& session, std::string_view commands, InternalDone done) {
          RunInternal(session, commands, std::move(done));
        });
    std::string why;
    if (!http_->Open(server_.config().metrics_listen, &why)) {
      if (server_.config().metrics_listen_set) {
        *error = why;
        return false;
      }
      DQ_LOG(kWarning, "%s; serving without the metrics endpoint (set server.metrics_listen)",
             why.c_str());
      http_.reset();
    }
  }
  return true;
}

uint64_t EventLoop::Tag(OpKind kind, const Connection* c) {
  // Kinds are 1 .. kOpKindEnd - 1; below 7, none has its low three bits all set.
  static_assert(kOpKindEnd <= io::kExternalTagBits,
                "a kind ending in binary 111 reads as an external handler's completion");
  if (c == nullptr) return kind;
  DQ_DCHECK(c->slot < (1u << 24));  // 24 bits of slot between the kind and the generation
  return (static_cast<uint64_t>(c->gen) << 32) | (static_cast<uint64_t>(c->slot) << 8) | kind;
}

void EventLoop::ArmAccept(int which) {
  Listening& l = listeners_[which];
  io_uring_sqe* sqe = GetSqe();
  io_uring_prep_multishot_accept(sqe, l.fd, nullptr, nullptr, SOCK_CLOEXEC);
  io_uring_sqe_set_data64(sqe, Tag(kAccept, nullptr) | (which == kTls ? kTlsBit : 0));
  l.armed = true;
}

void EventLoop::ArmAccepts() {
  for (int which : {kPlain, kTls}) {
    if (listeners_[which].fd >= 0 && !listeners_[which].armed) ArmAccept(which);
  }
}

void EventLoop::ArmRecv(Connection* c) {
  io_uring_sqe* sqe = GetSqe();
  io_uring_prep_recv_multishot(sqe, c->fd, nullptr, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = buffers_.group();
  io_uring_sqe_set_data64(sqe, Tag(kRecv, c));
  c->recv_armed = true;
  c->ops++;
}

void EventLoop::ArmTimer() {
  tick_.tv_sec = 0;
  tick_.tv_nsec = kTickMs * 1000000;
  io_uring_sqe* sqe = GetSqe();
  io_uring_prep_timeout(sqe, &tick_, 0, 0);
  io_uring_sqe_set_data64(sqe, Tag(kTimer, nullptr));
}

void EventLoop::ArmWake() {
  io_uring_sqe* sqe = GetSqe();
  io_uring_prep_read(sqe, wake_fd_, &wake_value_, sizeof(wake_value_), 0);
  io_uring_sqe_set_data64(sqe, Tag(kWake, nullptr));
}

void EventLoop::Stop() {
  stop_requested_.store(true, std::memory_order_release);
  uint64_t one = 1;
  // eventfd writes never block (the counter cannot overflow with a handful of writes).
  ssize_t n = write(wake_fd_, &one, sizeof(one));
  (void)n;
}

void EventLoop::Run() {
  current_ = this;
  for (;;) {
    while (!resume_.empty()) {
      std::vector<std::pair<uint32_t, uint32_t>> resume;
      resume.swap(resume_);
      for (auto [slot, gen] : resume) {
        Connection* c = conns_[slot].get();
        if (c != nullptr && c->gen == gen && c->state == ConnState::kOpen && !c->blocked) {
          ProcessInput(c);
        }
      }
    }
    FlushDirty();
    service_->Flush();
    if (stopping_ && live_ == 0 && !AnyAcceptArmed()) {
      // Every client is answered and gone; the upstream connections go last.
      service_->Shutdown();
      if (service_->quiescent() || now_ms_ > stop_deadline_ms_ + 2000) break;
    }
    // The next pump timer becomes the ring's wait timeout: no ticking through idle time.
    int ret;
    const int64_t wake = service_->NextWakeup();
    if (wake >= 0) {
      const int64_t wait_ms = std::max<int64_t>(0, wake - MonotonicMs());
      __kernel_timespec ts{wait_ms / 1000, (wait_ms % 1000) * 1000000};
      io_uring_cqe* first = nullptr;
      ret = io_uring_submit_and_wait_timeout(&ring_, &first, 1, &ts, nullptr);
    } else {
      ret = io_uring_submit_and_wait(&ring_, 1);
    }
    if (ret < 0 && ret != -EINTR && ret != -ETIME && ret != -EBUSY && ret != -EAGAIN) {
      DQ_LOG(kError, "thread %d: io_uring_submit_and_wait: %s", index_, strerror(-ret));
      break;
    }
    now_ms_ = MonotonicMs();
    wall_ms_ = RealtimeMs();
    service_->SetClock(now_ms_, wall_ms_);
    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      HandleCqe(cqe);
      ++seen;
    }
    io_uring_cq_advance(&ring_, seen);
    stats_.wheel_timers.store(service_->RunTimers(), std::memory_order_relaxed);
  }
  // Requests that reached the mailbox before it closed still get their (empty) part, so no
  // other loop waits for this one; hints are dropped with the queues they were about.
  mailbox_->Close(&mailbox_batch_);
  mailbox_batch_.hints.clear();
  mailbox_batch_.hints_overflowed = false;
  for (Mailbox::Task& task : mailbox_batch_.tasks) task(*this);
  mailbox_batch_.tasks.clear();
}

void EventLoop::HandleCqe(const io_uring_cqe* cqe) {
  const uint64_t tag = cqe->user_data;
  if ((tag & io::kExternalTagBits) == io::kExternalTagBits) {
    reinterpret_cast<io::CompletionHandler*>(tag & ~io::kExternalTagBits)->OnCompletion(*cqe);
    return;
  }
  const auto kind = static_cast<OpKind>(tag & 0xff);
  switch (kind) {
    case kAccept:
      OnAccept((tag & kTlsBit) != 0 ? kTls : kPlain, cqe->res, cqe->flags & IORING_CQE_F_MORE);
      return;
    case kTimer:
      OnTimer();
      return;
    case kWake:
      OnWake();
      return;
    case kIgnore:
      return;
    case kOpKindEnd:  // never a tag's kind: only the bound the static_assert in Tag() checks
      DQ_CHECK(kind != kOpKindEnd);
      return;
    case kRecv:
    case kSend:
      break;
  }
  const uint32_t slot = static_cast<uint32_t>((tag >> 8) & 0xffffff);
  const uint32_t gen = static_cast<uint32_t>(tag >> 32);
  Connection* c = slot < conns_.size() ? conns_[slot].get() : nullptr;
  if (c == nullptr || c->gen != gen) {
    // Cannot happen while slots are only freed with no operation in flight; keep the buffer
    // accounting right anyway, and say so.
    DQ_LOG(kError, "thread %d: completion of kind %d for a gone connection", index_, kind);
    if (kind == kRecv && (cqe->flags & IORING_CQE_F_BUFFER)) {
      buffers_.Recycle(static_cast<uint16_t>(cqe->flags >> IORING_CQE_BUFFER_SHIFT));
    }
    return;
  }
  if (kind == kRecv) {
    OnRecv(c, cqe);
  } else {
    OnSend(c, cqe->res);
  }
}

void EventLoop::OnAccept(int which, int res, bool more) {
  Listening& l = listeners_[which];
  if (!more) {
    l.armed = false;
    if (stopping_ && l.fd >= 0) {
      close(l.fd);
      l.fd = -1;
    }
  }
  if (res >= 0) {
    const int fd = res;
    LoopStats::Add(stats_.connections_received, 1);
    if (stopping_) {
      close(fd);
    } else if (!server_.AdmitClient()) {
      // Redis answers and closes; the write is non-blocking and tiny, so it cannot stall us.
      static const char kMsg[] = "-ERR max number of clients reached\r\n";
      ssize_t n = send(fd, kMsg, sizeof(kMsg) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
      (void)n;
      close(fd);
      LoopStats::Add(stats_.rejected_connections, 1);
      DQ_LOG(kWarning, "client refused: server.max_clients (%u) are connected",
             server_.config().max_clients);
    } else {
      // A full share of unauthenticated connections makes room by closing the oldest: whoever
      // holds sockets open without authenticating cannot lock others out for long.
      if (auth_gate_ && unauthenticated_count_ >= max_unauthenticated_) {
        EvictOldestUnauthenticated();
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      auto conn = std::make_unique<Connection>(server_.parser_limits());
      Connection* c = conn.get();
      c->fd = fd;
      c->session.id = server_.NextClientId();
      c->addr = SocketAddress(fd, true);
      c->laddr = SocketAddress(fd, false);
      c->session.peer_ip = c->addr.substr(0, c->addr.rfind(':'));
      c->created_ms = RealtimeMs();
      c->accepted_ms = now_ms_;
      c->last_active_ms = now_ms_;
      if (which == kTls) c->tls = std::make_unique<io::TlsStream>(server_.tls_context());
      Adopt(std::move(conn));
      if (auth_gate_) {
        unauthenticated_.push_back({c->slot, c->gen, now_ms_});
        ++unauthenticated_count_;
      }
      ArmRecv(c);
    }
  } else if (res != -ECANCELED && res != -EINVAL && res != -EBADF) {
    // EMFILE, ENFILE, ENOMEM...: the listener stays; the next tick re-arms accept.
    DQ_LOG(kWarning, "thread %d: accept failed: %s", index_, strerror(-res));
    return;
  }
  if (!more && !stopping_ && res >= 0) ArmAccept(which);
}

void EventLoop::OnRecv(Connection* c, const io_uring_cqe* cqe) {
  const int res = cqe->res;
  const bool more = cqe->flags & IORING_CQE_F_MORE;
  if (!more) {
    c->recv_armed = false;
    c->ops--;
  }
  if (res > 0) {
    const auto bid = static_cast<uint16_t>(cqe->flags >> IORING_CQE_BUFFER_SHIFT);
    // Input a blocked client (or one owing kMaxPendingReplies) sends meanwhile waits unparsed;
    // past the query-buffer limit the client is dropped, as Redis does, rather than buffered on.
    // Checked before the bytes are appended, so the buffer never grows past the limit.
    const uint64_t query_limit = QueryBufferLimit(server_.config());
    if (c->state == ConnState::kOpen &&
        c->parser.buffered() + static_cast<uint64_t>(res) > query_limit) {
      DQ_LOG(kWarning, "client id=%llu addr=%s dropped: over %llu bytes of unparsed input",
             static_cast<unsigned long long>(c->session.id), c->addr.c_str(),
             static_cast<unsigned long long>(query_limit));
      LoopStats::Add(stats_.query_limit_disconnections, 1);
      CloseNow(c);
    }
    bool peer_done = false;
    if (c->state == ConnState::kOpen) {
      LoopStats::Add(stats_.net_input_bytes, static_cast<uint64_t>(res));
      c->last_active_ms = now_ms_;
      if (c->tls == nullptr) {
        c->parser.Feed(buffers_.Buffer(bid), static_cast<size_t>(res));
      } else {
        peer_done = !ReceiveTls(c, buffers_.Buffer(bid), static_cast<size_t>(res));
      }
    }
    buffers_.Recycle(bid);  // lingering connections' input is discarded
    if (c->state == ConnState::kOpen) ProcessInput(c);
    if (peer_done && c->state == ConnState::kOpen) {
      // close_notify: the peer sends nothing more, as at EOF.
      if (c->blocked) {
        CloseNow(c);
      } else {
        Drain(c);
      }
    }
    if (!more && c->state != ConnState::kClosed) ArmRecv(c);
  } else if (res == 0) {
    // EOF: the peer will send nothing more (maybe a half-close). Everything it sent was already
    // processed, so answer what is owed and close.
    if (c->blocked) {
      // A client blocked in CONSUME that goes away is forgotten at once (as Redis frees it);
      // no job is leased to it.
      CloseNow(c);
    } else if (c->state == ConnState::kOpen || c->state == ConnState::kDraining) {
      Drain(c);
    } else if (c->state == ConnState::kLinger) {
      CloseNow(c);
    }
  } else if (res == -ENOBUFS) {
    // The buffer ring ran dry for a moment; buffers were recycled above, so simply re-arm.
    if (!more && c->state != ConnState::kClosed) ArmRecv(c);
  } else if (c->state != ConnState::kClosed) {
    CloseNow(c);  // ECONNRESET and friends
  }
  ReleaseIfDone(c);
}

void EventLoop::ProcessInput(Connection* c) {
  const Config& cfg = server_.config();
  uint64_t commands = 0;
  c->in_process = true;
  {
    std::string scratch;
    proto::ReplyWriter writer(&c->out, c->session.resp);
    queue::CommandContext ctx = service_->Context(c->session, writer, this);
    std::vector<std::string> replay;
    std::vector<std::string_view> replay_args;
    while (c->state == ConnState::kOpen && !c->blocked && c->pending.size() < kMaxPendingReplies) {
      // A command that waited for a namespace lookup (queue/commands/auth.h) runs again before the
      // next one is read.
      const bool replaying = !c->session.replay.empty();
      if (replaying) {
        replay.swap(c->session.replay);
        c->session.replay.clear();
        replay_args.assign(replay.begin(), replay.end());
      }
      const proto::ParseStatus st = replaying ? proto::ParseStatus::kCommand : c->parser.Next();
      if (st == proto::ParseStatus::kNeedMore) break;
      // Behind a reply still owed, a reply waits its turn in a pending slot of its own.
      std::string* target = c->pending.empty() ? &c->out : &scratch;
      writer = proto::ReplyWriter(target, c->session.resp);
      if (st == proto::ParseStatus::kError) {
        writer.Error(c->parser.error());
        LoopStats::Add(stats_.protocol_errors, 1);
        c->state = ConnState::kDraining;
      } else {
        const auto& args = replaying ? replay_args : c->parser.args();
        const size_t n = std::min(args[0].size(), sizeof(c->last_cmd) - 1);
        for (size_t i = 0; i < n; ++i) {
          const char ch = args[0][i];
          c->last_cmd[i] = base::AsciiLower(ch);
        }
        c->last_cmd[n] = '\0';
        running_ = c;
        running_deferred_ = false;
        running_ctx_ = &ctx;
        const size_t mark = target->size();
        running_start_us_ = timed_ ? base::MonotonicUs() : 0;
        const bool was_authenticated = c->session.authenticated;
        queue::Dispatch(ctx, queue::Args(args.data(), args.size()));
        if (auth_gate_ && !c->internal && c->session.authenticated != was_authenticated) {
          NoteAuthChange(c);
        }
        running_ = nullptr;
        running_ctx_ = nullptr;
        if (timed_ && !running_deferred_) {
          CommandDone(c, ctx.spec, running_start_us_, std::string_view(*target).substr(mark),
                      false);
        }
        ++commands;
        if (c->session.close_after_reply) c->state = ConnState::kDraining;
      }
      if (target == &scratch && !running_deferred_) {
        c->pending.push_back(
            PendingReply{c->next_seq++, true, false, c->session.resp, std::move(scratch)});
        scratch.clear();
      }
      running_deferred_ = false;
      if (c->PendingOutput() > cfg.max_output_buffer) break;
    }
  }
  c->in_process = false;
  LoopStats::Add(stats_.commands, commands);
  if (c->PendingOutput() > cfg.max_output_buffer) {
    // A client that does not read its replies is dropped rather than growing our memory.
    DQ_LOG(kWarning, "client id=%llu addr=%s dropped: output buffer over %llu bytes",
           static_cast<unsigned long long>(c->session.id), c->addr.c_str(),
           static_cast<unsigned long long>(cfg.max_output_buffer));
    LoopStats::Add(stats_.output_limit_disconnections, 1);
    CloseNow(c);
    return;
  }
  if (c->state == ConnState::kDraining) {
    Drain(c);
  } else {
    MarkDirty(c);
  }
}

void EventLoop::CommandDone(const Connection* c, const queue::CommandSpec* spec, int64_t start_us,
                            std::string_view reply, bool blocking) {
  const int64_t us = base::MonotonicUs() - start_us;
  if (metrics_) {
    CommandMetrics& cm = server_.command_metrics();
    cm.Record(cm.SlotOf(spec), us, !reply.empty() && reply[0] == '-');
  }
  // A blocking CONSUME waits by design: its wait is not slowness.
  if (slowlog_us_ > 0 && us >= slowlog_us_ && !blocking) {
    DQ_LOG(kWarning, "slow command: %s took %lld ms (client id=%llu addr=%s)",
           spec != nullptr ? spec->name : "unknown", static_cast<long long>(us / 1000),
           static_cast<unsigned long long>(c->session.id), c->addr.c_str());
  }
}

void EventLoop::StartSend(Connection* c) {
  if (c->internal) return CompleteInternal(c);
  if (c->send_inflight || c->state == ConnState::kClosed) return;
  if (c->send_off == c->sending.size()) {
    c->sending.clear();
    c->send_off = 0;
    if (c->sending.capacity() > kKeepBufferBytes) c->sending = std::string();
    if (c->tls != nullptr) {
      SealTls(c);
    } else {
      std::swap(c->out, c->sending);
    }
    if (c->sending.empty()) {
      // Nothing left to write; a draining connection closes once no reply is owed either.
      if (c->state == ConnState::kDraining && c->pending.empty()) {
        if (!c->recv_armed) {
          CloseNow(c);  // the peer already sent EOF
        } else {
          // Send FIN after the last reply and keep reading (discarding) until the peer closes,
          // so unread input on our side does not turn our close into a reset that would
          // destroy the reply.
          shutdown(c->fd, SHUT_WR);
          c->state = ConnState::kLinger;
          c->linger_deadline_ms = now_ms_ + (stopping_ ? kShutdownLingerMs : kLingerMs);
          watched_.emplace_back(c->slot, c->gen);
        }
      }
      return;
    }
  }
  io_uring_sqe* sqe = GetSqe();
  io_uring_prep_send(sqe, c->fd, c->sending.data() + c->send_off, c->sending.size() - c->send_off,
                     MSG_NOSIGNAL);
  io_uring_sqe_set_data64(sqe, Tag(kSend, c));
  c->send_inflight = true;
  c->ops++;
}

void EventLoop::OnSend(Connection* c, int res) {
  c->send_inflight = false;
  c->ops--;
  if (c->state == ConnState::kClosed) return ReleaseIfDone(c);
  if (res < 0) {
    CloseNow(c);
    return ReleaseIfDone(c);
  }
  LoopStats::Add(stats_.net_output_bytes, static_cast<uint64_t>(res));
  c->send_off += static_cast<size_t>(res);
  StartSend(c);
  ReleaseIfDone(c);
}

bool EventLoop::ReceiveTls(Connection* c, const char* data, size_t n) {
  tls_plain_.clear();
  const bool ok = c->tls->Receive(data, n, &tls_plain_);
  if (!tls_plain_.empty()) c->parser.Feed(tls_plain_.data(), tls_plain_.size());
  if (tls_plain_.capacity() > kKeepBufferBytes) tls_plain_ = std::string();
  if (!ok) {
    // A refused certificate, a wrong protocol, a bad record: say why once, send the alert
    // OpenSSL made (the client prints it) and close.
    DQ_LOG(kWarning, "TLS client id=%llu addr=%s refused: %s",
           static_cast<unsigned long long>(c->session.id), c->addr.c_str(),
           c->tls->error().c_str());
    c->tls_closed = true;
    c->out.clear();
    if (c->blocked || !c->pending.empty()) {
      CloseNow(c);  // replies owed cannot be sent any more
    } else {
      c->state = ConnState::kDraining;
      StartSend(c);
    }
    return true;
  }
  // Handshake messages to send, even with no reply written.
  if (c->tls->has_output() && !c->dirty) {
    c->dirty = true;
    dirty_.emplace_back(c->slot, c->gen);
  }
  return !c->tls->peer_closed();
}

void EventLoop::SealTls(Connection* c) {
  if (!c->out.empty()) {
    if (!c->tls->Write(c->out)) {
      DQ_LOG(kWarning, "TLS client id=%llu addr=%s: %s",
             static_cast<unsigned long long>(c->session.id), c->addr.c_str(),
             c->tls->error().c_str());
    }
    c->out.clear();
  }
  if (c->state == ConnState::kDraining && c->pending.empty() && !c->tls_closed) {
    c->tls->Close();
    c->tls_closed = true;
  }
  c->tls->TakeOutput(&c->sending);
}

void EventLoop::Drain(Connection* c) {
  if (c->state == ConnState::kClosed || c->state == ConnState::kLinger) return;
  c->state = ConnState::kDraining;
  StartSend(c);
}

void EventLoop::CloseNow(Connection* c) {
  if (c->state == ConnState::kClosed) return;
  if (c->state != ConnState::kLinger) watched_.emplace_back(c->slot, c->gen);  // else already
  c->state = ConnState::kClosed;
  // A consumer blocked on this connection is forgotten now, not when the socket is released.
  if (c->blocked) service_->OnClientGone(c->session.id);
  // shutdown() completes the armed multishot recv and any send in flight; the fd is closed once
  // they have reported back (ReleaseIfDone), so no operation ever sees a reused fd number.
  if (c->fd >= 0) shutdown(c->fd, SHUT_RDWR);
}

void EventLoop::ReleaseIfDone(Connection* c) {
  if (c->state != ConnState::kClosed || c->ops > 0) return;
  if (c->internal) {
    // Closed before its commands were all answered (shutdown, output limit, idle_timeout).
    if (InternalDone done = std::move(c->internal_done)) done(false, {}, c->session);
  } else {
    close(c->fd);
    c->fd = -1;
    server_.ReleaseClient();
    if (auth_gate_ && !c->session.authenticated) --unauthenticated_count_;
  }
  service_->OnClientGone(c->session.id);
  std::unique_ptr<Connection> dead = std::move(conns_[c->slot]);
  free_slots_.push_back(c->slot);
  --live_;
}

Connection* EventLoop::Adopt(std::unique_ptr<Connection> conn) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<uint32_t>(conns_.size());
    conns_.emplace_back();
  }
  Connection* c = conn.get();
  c->slot = slot;
  c->gen = next_gen_++;
  conns_[slot] = std::move(conn);
  ++live_;
  return c;
}

Connection* EventLoop::Find(uint32_t slot, uint32_t gen) const {
  Connection* c = slot < conns_.size() ? conns_[slot].get() : nullptr;
  return c != nullptr && c->gen == gen ? c : nullptr;
}

// Every tick costs what is due, not what is connected: the tick looks at lingering and closing
// connections and at the front of the unauthenticated order; only idle_timeout (once a second)
// and a shutdown walk every connection.
void EventLoop::OnTimer() {
  ArmTimer();
  service_->OnLoopTick(now_ms_, wall_ms_, stopping_);
  if (!stopping_) ArmAccepts();
  const uint32_t idle_s = server_.config().idle_timeout;
  const bool idle_scan = idle_s > 0 && now_ms_ >= next_idle_scan_ms_;
  if (idle_scan) next_idle_scan_ms_ = now_ms_ + 1000;
  if (idle_scan || stopping_) {
    for (auto& owned : conns_) {
      Connection* c = owned.get();
      if (c == nullptr) continue;
      if (idle_scan && c->state == ConnState::kOpen &&
          now_ms_ - c->last_active_ms > static_cast<int64_t>(idle_s) * 1000) {
        CloseNow(c);
      } else if (stopping_ && now_ms_ >= stop_deadline_ms_) {
        CloseNow(c);
      }
    }
  }
  if (auth_gate_) ExpireUnauthenticated();
  // Lingering connections whose deadline passed close; closed ones are released once their last
  // operation reported back. An entry goes when its connection is released.
  watched_scratch_.clear();
  watched_scratch_.swap(watched_);
  for (const auto& [slot, gen] : watched_scratch_) {
    Connection* c = Find(slot, gen);
    if (c == nullptr) continue;
    if (c->state == ConnState::kLinger && now_ms_ >= c->linger_deadline_ms) CloseNow(c);
    if (c->state == ConnState::kClosed) {
      ReleaseIfDone(c);  // may free the slot
      if (Find(slot, gen) == nullptr) continue;
    }
    watched_.emplace_back(slot, gen);
  }
}

void EventLoop::OnWake() {
  mailbox_->Take(&mailbox_batch_);
  RunMailbox(mailbox_batch_);
  if (stop_requested_.load(std::memory_order_acquire) && !stopping_) BeginShutdown();
  // Read on while stopping too: other loops' CLIENT LIST and INFO still need this loop's answer.
  ArmWake();
}

void EventLoop::RunMailbox(Mailbox::Batch& batch) {
  for (const Mailbox::Hint& h : batch.hints) service_->RunNote(h);
  // Hints were dropped: poll every queue this loop has consumers or pumps on.
  if (batch.hints_overflowed) service_->OnHintsDropped(now_ms_, wall_ms_);
  for (Mailbox::Task& task : batch.tasks) task(*this);
  batch.hints.clear();
  batch.tasks.clear();
}

void EventLoop::BeginShutdown() {
  stopping_ = true;
  stop_deadline_ms_ = now_ms_ + kShutdownDrainMs;
  // Stop accepting. shutdown() takes the socket out of LISTEN at once; the multishot accept holds
  // its own reference to the file, so it is cancelled too and Run() waits for its last
  // completion: a ring torn down with the accept still armed would keep the port open (and
  // completing handshakes) for a while after the process exited.
  for (const Listening& l : listeners_) {
    if (l.fd < 0) continue;
    shutdown(l.fd, SHUT_RDWR);
    if (l.armed) {
      io_uring_sqe* sqe = GetSqe();
      io_uring_prep_cancel_fd(sqe, l.fd, 0);
      io_uring_sqe_set_data64(sqe, Tag(kIgnore, nullptr));
    }
  }
  if (http_) http_->Shutdown();
  service_->ReleaseWaiters();  // blocked consumers get their null reply now
  for (auto& owned : conns_) {
    Connection* c = owned.get();
    if (c != nullptr) Drain(c);
  }
}

thread_local EventLoop* EventLoop::current_ = nullptr;

}  // namespace deferq::net
