// One pipelined connection to an upstream Redis, driven by the ring of the loop thread that owns
// it. Requests are queued in a FIFO; replies (parsed by the hiredis reader) complete them in
// order. Requests queued during one loop iteration leave in one write.
//
// Failure handling, as Envoy's redis proxy does it: when the oldest request waits longer than
// the timeout, or the socket fails, the connection is closed and every pending request fails with
// "TRYAGAIN pool '<name>' unavailable"; the connection reconnects with exponential backoff.
#pragma once

#include <hiredis/read.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>

#include "net/io_ring.h"
#include "persist/redis_url.h"
#include "persist/scripts.h"

struct redisReply;

namespace deferq::persist {

// Figures about one pool that every thread's connections update and INFO reads (atomics).
struct PoolStats {
  std::atomic<int> connections_up{0};
  std::atomic<int64_t> inflight{0};
  std::atomic<int64_t> latency_us{0};  // of the last reply, any thread
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failures{0};  // requests answered TRYAGAIN
};

// A reply, or an error text when the request never got one (pool unavailable).
struct UpstreamResult {
  const redisReply* reply = nullptr;
  std::string_view error;  // "TRYAGAIN pool 'default' unavailable" when reply is null
};
using UpstreamCallback = std::function<void(const UpstreamResult&)>;

class UpstreamConnection final {
 public:
  UpstreamConnection(net::IoRing& io, const RedisUrl& url, const sockaddr_storage& addr,
                     socklen_t addr_len, std::string pool_name, int timeout_ms, PoolStats* stats);
  ~UpstreamConnection();
  UpstreamConnection(const UpstreamConnection&) = delete;
  UpstreamConnection& operator=(const UpstreamConnection&) = delete;

  enum class State { kIdle, kConnecting, kReady, kClosing, kBackoff };
  State state() const { return state_; }
  size_t pending() const { return pending_.size(); }

  // Subscriber mode (pub/sub): replies that arrive with no request pending are messages and go
  // to `handler`; `on_connect` runs each time the connection comes up (to SUBSCRIBE again).
  void SetSubscriber(std::function<void(const redisReply*)> handler,
                     std::function<void()> on_connect) {
    push_handler_ = std::move(handler);
    on_connect_ = std::move(on_connect);
  }

  // Queues a RESP-encoded command. `script` names the script of an EVALSHA request, so a
  // NOSCRIPT reply can be retried as EVAL; Script::kCount for anything else. Fails the callback
  // at once (TRYAGAIN) when the connection is down.
  void Send(std::string request, Script script, UpstreamCallback cb);
  // Starts the write of everything queued (once per loop iteration).
  void Flush();
  // Once per loop tick: request timeouts, reconnects.
  void Tick();
  // Begins connecting when idle; used at startup and after backoff.
  void Connect();
  // Fails everything pending and closes (server shutdown).
  void Shutdown();
  bool quiescent() const { return ops_ == 0; }

 private:
  struct Request {
    std::string request;  // kept for a NOSCRIPT retry of EVALSHA requests only
    Script script;
    UpstreamCallback cb;
    int64_t queued_ms;
  };
  enum Op : uint8_t { kConnectOp, kRecvOp, kSendOp };

  void Fail(std::string_view why);
  void CloseSocket();
  void ArmRecv();
  void OnConnect(int res);
  void OnRecv(const io_uring_cqe& cqe);
  void OnSend(int res);
  void DeliverReplies();
  void SendRaw(std::string request, Script script, UpstreamCallback cb);

  net::IoRing& io_;
  RedisUrl url_;
  sockaddr_storage addr_;
  socklen_t addr_len_;
  std::string pool_name_;
  std::string unavailable_;  // "TRYAGAIN pool '<name>' unavailable"
  int timeout_ms_;
  PoolStats* stats_;

  State state_ = State::kIdle;
  int fd_ = -1;
  int ops_ = 0;
  bool recv_armed_ = false;
  bool send_inflight_ = false;
  int64_t backoff_ms_ = 0;
  int64_t next_attempt_ms_ = 0;
  int64_t connect_deadline_ms_ = 0;
  bool reported_down_ = false;
  bool stopping_ = false;

  redisReader* reader_ = nullptr;
  std::function<void(const redisReply*)> push_handler_;
  std::function<void()> on_connect_;
  std::deque<Request> pending_;  // sent or queued, in order
  std::string out_;
  std::string sending_;
  size_t send_off_ = 0;

  // One completion handler per kind of operation, so a completion says what it was for.
  struct OpHandler final : net::CompletionHandler {
    OpHandler(UpstreamConnection* o, Op k) : owner(o), op(k) {}
    UpstreamConnection* owner;
    Op op;
    void OnCompletion(const io_uring_cqe& cqe) override;
  };
  OpHandler connect_handler_{this, kConnectOp};
  OpHandler recv_handler_{this, kRecvOp};
  OpHandler send_handler_{this, kSendOp};
};

// Encodes a command as a RESP array of bulk strings.
void AppendCommand(std::string* out, std::initializer_list<std::string_view> args);
void AppendArrayHeader(std::string* out, size_t n);
void AppendBulk(std::string* out, std::string_view s);

}  // namespace deferq::persist
