// One pipelined connection to an upstream Redis, driven by the ring of the loop thread that owns
// it. Requests are queued in a FIFO; replies (parsed by the hiredis reader) complete them in
// order. Requests queued during one loop iteration leave in one write.
//
// Life of a connection: connect, then the handshake (persist/handshake.h: AUTH, SELECT, the pool
// checks, FUNCTION LOAD when the library is missing), pipelined; requests queued meanwhile are
// held, not sent, and leave when the last step passed. A refused check closes the connection with
// its reason.
//
// Failure handling, as Envoy's redis proxy does it, with one difference: what a failed request
// answers depends on whether Redis may have seen it (docs/operations.md, failures).
// - The timeout counts from the last progress (bytes received while requests are outstanding),
//   not from the age of the oldest request, so a large reply that flows never fails the requests
//   queued behind it. No progress for `timeout_ms`, or a socket error, closes the connection.
//   At most 32 requests of one client are on the wire at once (its others wait in deferq, other
//   clients' go ahead): Redis answers nothing of a pipeline before it has run all it read, so a
//   deep pipeline of slow commands would be a silence as long as all of them together.
// - A request none of whose bytes were handed to the kernel answers
//   "TRYAGAIN pool '<name>' unavailable" (": <reason>" when a check refused the pool): safe to
//   retry. A request that was written, even partly, answers "TIMEOUT pool '<name>' did not answer:
//   the command may have been applied".
// - The connection reconnects with exponential backoff, and runs the handshake again each time.
//
// Replicated writes (SetWaitReplicas, the pool's `wait_replicas`): the connection appends one
// `WAIT n timeout` after each batch of state-changing requests it hands to the kernel (a batch is
// what accumulated while the previous write was in flight), holds those requests' replies, and
// releases them when WAIT answers: as they are when at least n replicas confirmed, otherwise as
// "NOREPLICAS ..." (applied on the master, not confirmed on enough replicas). Reads and error
// replies are not held. While a WAIT is outstanding, the progress timeout grows by its timeout:
// Redis answers nothing on this connection while WAIT blocks.
#pragma once

#include <hiredis/read.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/histogram.h"
#include "config/redis_url.h"
#include "io/io_ring.h"
#include "io/tls.h"
#include "persist/endpoint.h"
#include "persist/handshake.h"
#include "persist/scripts.h"
#include "persist/upstream_link.h"
#include "proto/request_writer.h"

struct redisReply;

namespace deferq::persist {

// Figures about one pool that every thread's connections update and INFO reads (atomics).
struct PoolStats {
  std::atomic<int> connections_up{0};
  std::atomic<int64_t> inflight{0};
  std::atomic<int64_t> latency_us{0};  // of the last reply, any thread
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failures{0};      // requests answered TRYAGAIN
  std::atomic<uint64_t> timeouts{0};      // requests answered TIMEOUT (sent, no reply)
  std::atomic<uint64_t> unreplicated{0};  // writes answered NOREPLICAS (WAIT fell short)
  // A handshake check refuses the pool (set by the first refused connection, cleared by the first
  // that passes): one log line per transition for the whole pool, not one per connection.
  std::atomic<bool> refused{false};
  std::atomic<bool> warned{false};      // the handshake's warnings (AOF off...) were logged once
  std::atomic<uint64_t> reconnects{0};  // connections up again after having been up
  // Writes refused while the pool serves (persist/handshake.h WriteRefusal, and Redis's own OOM
  // and MISCONF): how many connections refuse writes now (an evicting policy, an eviction), and
  // whether Redis last refused a write for memory (OOM) or for its disk (MISCONF). Each is
  // logged once per transition for the whole pool.
  std::atomic<int> refusing_writes{0};
  std::atomic<bool> out_of_memory{false};
  std::atomic<bool> cannot_persist{false};
  std::atomic<uint64_t> refused_policy{0};   // writes answered TRYAGAIN for the policy/eviction
  std::atomic<uint64_t> refused_oom{0};      // commands Redis refused with OOM
  std::atomic<uint64_t> refused_misconf{0};  // commands Redis refused with MISCONF
  base::Histogram latency{base::LatencyBoundsUs()};  // request queued -> reply, any thread
  bool record_latency = true;  // false when metrics are off; set before the loops start
};

class UpstreamConnection final : public UpstreamLink {
 public:
  // `handshake` runs on every connect, before any request is sent.
  UpstreamConnection(io::IoRing& io, const RedisUrl& url, const sockaddr_storage& addr,
                     socklen_t addr_len, std::string pool_name, int timeout_ms, PoolStats* stats,
                     std::shared_ptr<const Handshake> handshake);
  ~UpstreamConnection() override;
  UpstreamConnection(const UpstreamConnection&) = delete;
  UpstreamConnection& operator=(const UpstreamConnection&) = delete;

  // kHandshake: connected, setup steps in flight, requests held.
  enum class State { kIdle, kConnecting, kHandshake, kReady, kClosing, kBackoff };
  State state() const { return state_; }
  bool ready() const override { return state_ == State::kReady; }
  bool accepting() const override {
    return state_ == State::kReady || state_ == State::kConnecting || state_ == State::kHandshake;
  }
  size_t pending() const { return pending_.size() + waiting_count_; }

  // State changes (NeedsReplicaWait) answer only once `WAIT replicas timeout_ms` confirmed them;
  // 0 replicas turns it off. Set before the first Send.
  void SetWaitReplicas(int replicas, int timeout_ms);

  // Connect to what `source` names (a Sentinel pool's master) instead of the fixed address: asked
  // on every connect; a new generation closes this connection and reconnects at once; a refused
  // check, a failed connect or a READONLY reply (a demoted master) makes the source look again.
  void SetEndpointSource(std::shared_ptr<EndpointSource> source) { source_ = std::move(source); }

  // Subscriber mode (pub/sub): replies that arrive with no request pending are messages and go
  // to `handler`; `on_connect` runs each time the handshake passes (to SUBSCRIBE again).
  void SetSubscriber(std::function<void(const redisReply*)> handler,
                     std::function<void()> on_connect) {
    push_handler_ = std::move(handler);
    on_connect_ = std::move(on_connect);
  }

  // Queues a RESP-encoded command. `script` names the function of an FCALL request
  // (Script::kCount for anything else): a "function not found" reply means the library was
  // removed under the connection, which then loads it again and answers the request TRYAGAIN
  // (nothing was applied). Fails the callback at once (TRYAGAIN) when the connection is down.
  // `affinity` names the client: its requests reach Redis in the order sent, at most 32 at once.
  void Send(std::string request, Script script, uint64_t affinity, UpstreamCallback cb) override;
  // Once per loop iteration, after its completions were handled (so the bytes that came are
  // counted): the progress timeout, then the write of everything queued.
  void Flush() override;
  // Once per loop tick: connect timeout, reconnects.
  void Tick() override;
  // Begins connecting when idle; used at startup and after backoff.
  void Connect();
  // Fails everything pending and closes (server shutdown).
  void Shutdown() override;
  bool quiescent() const override { return ops_ == 0; }

 private:
  struct Request {
    std::string request;  // held: the whole request; emptied once it is on the wire
    Script script = Script::kCount;
    UpstreamCallback cb;
    int64_t queued_ms = 0;
    int64_t queued_us = 0;  // monotonic µs, for the latency histogram (0: not recorded)
    uint64_t offset = 0;    // where its bytes begin in this socket's output stream
    int step = -1;          // index of its handshake step; -1 for traffic
    uint64_t affinity = 0;
    bool wait = false;        // the WAIT after a batch of writes
    bool health = false;      // the periodic health check (HealthRequest)
    bool needs_wait = false;  // a write: its reply is held until the next WAIT answers
  };
  // A write's reply that came, held until the WAIT of its batch answers.
  struct Held {
    Request req;
    redisReply* reply;
  };
  // One client's requests on this connection: how many are on the wire, and the ones waiting.
  struct ClientQueue {
    std::deque<Request> waiting;
    uint32_t on_wire = 0;
  };
  enum Op : uint8_t { kConnectOp, kRecvOp, kSendOp };

  // Closes because the socket failed or timed out (logged per connection).
  void Fail(std::string_view why);
  // Closes because a handshake check refused the pool (logged once per pool).
  void Refuse(std::string_view reason);
  // FUNCTION LOAD REPLACE of the library again (it was removed under a live connection).
  void ReloadLibrary();
  // The pool's health while serving: asked every kHealthCheckMs (Tick), answered here.
  void SendHealthCheck();
  void OnHealth(const redisReply& reply);
  // Writes answer TRYAGAIN with `reason` from now on ("" lifts it); logged per pool transition.
  void SetWritesRefused(std::string reason);
  // Redis's own refusals (OOM, MISCONF): true, with *error naming the pool and the cause, when
  // `reply` is one (logged once per pool transition). A write that succeeded ends them.
  bool NoteRedisRefusal(const redisReply& reply, Script script, std::string* error);
  void Close(std::string_view why, bool log);
  void SendSetupSteps();
  void FinishHandshake();
  void Enqueue(Request req);
  void TopUp(uint64_t affinity);
  void Write();
  void CloseSocket();
  void ArmRecv();
  void OnConnect(int res);
  void OnRecv(const io_uring_cqe& cqe);
  void OnSend(int res);
  void DeliverReplies();
  void AppendWait();
  // The WAIT of the held writes answered (`wait_reply`; null when the connection failed first).
  void ReleaseHeld(const redisReply* wait_reply);

  io::IoRing& io_;
  RedisUrl url_;
  sockaddr_storage addr_;
  socklen_t addr_len_;
  std::string pool_name_;
  std::string unavailable_;      // "TRYAGAIN pool '<name>' unavailable"
  std::string timed_out_;        // "TIMEOUT pool '<name>' did not answer: ..."
  std::string refused_;          // unavailable_ + ": <reason>" while a check refuses; else empty
  std::string library_missing_;  // unavailable_ + ": the function library was missing ..."
  bool reloading_library_ = false;
  // The health check (SendHealthCheck): when next, whether one is out, the last evicted_keys
  // read (-1: none since connect), and why writes are refused (empty: they are not).
  int64_t next_health_ms_ = 0;
  bool health_inflight_ = false;
  int64_t evicted_keys_ = -1;
  std::string writes_refused_;  // "TRYAGAIN pool '<name>' unavailable: <reason>", or empty
  int timeout_ms_;
  PoolStats* stats_;
  std::shared_ptr<const Handshake> handshake_;
  int wait_replicas_ = 0;
  int wait_timeout_ms_ = 0;
  size_t unwaited_writes_ = 0;  // writes in out_ since the last WAIT
  size_t waits_pending_ = 0;    // WAITs sent or queued, not answered
  std::deque<Held> held_;       // replies of writes whose WAIT has not answered
  std::shared_ptr<EndpointSource> source_;
  uint64_t generation_ = 0;  // of source_'s address this connection went to

  State state_ = State::kIdle;
  int fd_ = -1;
  int ops_ = 0;
  bool recv_armed_ = false;
  bool send_inflight_ = false;
  int64_t backoff_ms_ = 0;
  int64_t next_attempt_ms_ = 0;
  int64_t connect_deadline_ms_ = 0;
  int64_t last_progress_ms_ = 0;  // last bytes received, or when work began on an idle socket
  bool reported_down_ = false;
  bool ever_up_ = false;  // a later connect counts as a reconnect
  bool stopping_ = false;

  redisReader* reader_ = nullptr;
  std::function<void(const redisReply*)> push_handler_;
  std::function<void()> on_connect_;
  std::deque<Request> pending_;  // queued in out_ or sent, in order
  // Clients with requests on the wire or waiting (not in the output stream yet: held until the
  // handshake passed, or beyond the client's cap).
  std::unordered_map<uint64_t, ClientQueue> clients_;
  size_t waiting_count_ = 0;
  size_t setup_sent_ = 0;         // handshake steps sent on this socket
  bool library_present_ = false;  // a check found the library loaded: no FUNCTION LOAD
  std::string out_;
  std::string sending_;
  // rediss://: the session of this socket (made on connect). `out_` is encrypted into `sending_`,
  // and sent_bytes_ counts plaintext handed to it (a request sealed may have reached Redis).
  std::unique_ptr<io::TlsStream> tls_;
  std::string tls_plain_;  // scratch: what one receive decrypted
  size_t send_off_ = 0;
  // Byte counts of this socket's output stream: appended to out_, and taken by the kernel. A
  // request whose offset is below sent_bytes_ (or the send in flight) may have reached Redis.
  uint64_t stream_bytes_ = 0;
  uint64_t sent_bytes_ = 0;

  // One completion handler per kind of operation, so a completion says what it was for.
  struct OpHandler final : io::CompletionHandler {
    OpHandler(UpstreamConnection* o, Op k) : owner(o), op(k) {}
    UpstreamConnection* owner;
    Op op;
    void OnCompletion(const io_uring_cqe& cqe) override;
  };
  OpHandler connect_handler_{this, kConnectOp};
  OpHandler recv_handler_{this, kRecvOp};
  OpHandler send_handler_{this, kSendOp};
};

// Whether `script` changes jobs' state, so that wait_replicas waits for it: everything except the
// reads (JOB, PEEK, QSTAT) and the pump and lease upkeep, whose effect the next call redoes on a
// promoted replica. Plain commands (Script::kCount) are registry reads and wake-up markers.
bool NeedsReplicaWait(Script script);

// Requests are encoded by proto's request writer (proto/request_writer.h).
using proto::AppendArrayHeader;
using proto::AppendBulk;
using proto::AppendCommand;

}  // namespace deferq::persist
