// One event loop per thread: an io_uring ring created on its own thread, a SO_REUSEPORT listener
// with multishot accept, multishot recv from a provided-buffer ring, and at most one send in
// flight per connection. Everything a loop owns (connections, parsers, sessions, its
// queue::Service) is touched only by its own thread. Other threads reach it only through its
// Mailbox: typed hints and closures run here on the next iteration; it never locks, and is never
// locked by, another loop (docs/architecture.md, "Thread boundary").
#pragma once

#include <liburing.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "io/buffer_ring.h"
#include "io/io_ring.h"
#include "net/connection.h"
#include "net/http_listener.h"
#include "net/mailbox.h"
#include "persist/pool.h"
#include "proto/reply_writer.h"
#include "queue/context/client_port.h"
#include "queue/service.h"

namespace deferq::net {

// Replies owed per connection at most; past this the connection reads no further commands until
// Redis has answered some (a bounded queue instead of unbounded buffering).
inline constexpr size_t kMaxPendingReplies = 4096;

class LoopHost;
class ClientsFanout;

// Counters a loop keeps about itself; summed by Server::Stats(). Only the owner writes.
struct alignas(64) LoopStats {
  std::atomic<uint64_t> connections_received{0};
  std::atomic<uint64_t> rejected_connections{0};
  std::atomic<uint64_t> commands{0};
  std::atomic<uint64_t> net_input_bytes{0};
  std::atomic<uint64_t> net_output_bytes{0};
  std::atomic<uint64_t> protocol_errors{0};
  std::atomic<uint64_t> output_limit_disconnections{0};
  std::atomic<uint64_t> query_limit_disconnections{0};
  // With auth.required: connections closed for not authenticating in time, and the oldest
  // unauthenticated ones closed to make room (a quarter of max_clients at most).
  std::atomic<uint64_t> auth_timeout_disconnections{0};
  std::atomic<uint64_t> unauthenticated_evictions{0};
  std::atomic<uint64_t> wheel_timers{0};  // pending in this loop's timing wheel (a gauge)

  static void Add(std::atomic<uint64_t>& c, uint64_t n) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
};

class EventLoop final : public io::IoRing, public queue::ClientPort {
 public:
  EventLoop(LoopHost& server, int index);
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs on the loop's own thread: creates the ring, buffer ring and listener.
  bool Init(std::string* error);
  // Serves until Stop() and the drain that follows it are done.
  void Run();
  // Thread-safe: asks the loop to stop accepting, flush what it owes, and return from Run().
  void Stop();
  // Where other threads post to this loop (thread-safe).
  Mailbox& mailbox() { return *mailbox_; }
  int index() const { return index_; }
  // On this loop's thread: offer `tag` to this loop's consumers.

  // queue::ClientPort, for the connection whose command is running / whose reply is owed.
  queue::ReplyTicket Defer(bool blocking) override;
  proto::ReplyWriter* Begin(const queue::ReplyTicket& ticket) override;
  void Finish(const queue::ReplyTicket& ticket) override;
  bool Connected(const queue::ReplyTicket& ticket) const override;

  const LoopStats& stats() const { return stats_; }
  // On this loop's thread: starts a clients query across every loop (ClientsFanout); `done` runs
  // here once every loop has answered, or at once with an error when too many are in flight.
  void StartClientsQuery(queue::ClientsQuery query, queue::ClientsDone done);
  // On this loop's thread: this loop's part of a query (its CLIENT LIST lines, counts, kills).
  void AnswerClientsQuery(const queue::ClientsQuery& query, queue::ClientsReport* part);
  // CLIENT INFO line of client `id`; only from this loop's thread while it runs a command.
  bool DescribeOwnClient(uint64_t id, std::string* out) const;
  // On this loop's thread: runs `commands` (RESP requests) with `session`'s identity, as a
  // connection would (the console's pages, net/console.h); `done` gets the replies once every
  // command is answered, from a later point of this loop's iteration, never from this call.
  void RunInternal(const queue::Session& session, std::string_view commands, InternalDone done);
  // The loop running on the calling thread (nullptr on other threads).
  static EventLoop* current() { return current_; }

 private:
  // The low byte of a loop's own completion tags. kOpKindEnd follows the last kind: every kind
  // is below it (Tag() checks that none can end in binary 111, the external handlers' mark).
  enum OpKind : uint8_t { kAccept = 1, kRecv, kSend, kTimer, kWake, kIgnore, kOpKindEnd };

  static uint64_t Tag(OpKind kind, const Connection* c);
  // The loop's listeners: server.listen, and tls.listen when set (its accepts carry kTlsBit).
  struct Listening {
    int fd = -1;
    bool armed = false;
  };
  static constexpr uint64_t kTlsBit = uint64_t{1} << 8;
  enum Which : int { kPlain = 0, kTls = 1 };
  bool AnyAcceptArmed() const { return listeners_[kPlain].armed || listeners_[kTls].armed; }
  void ArmAccept(int which);
  void ArmAccepts();
  void ArmRecv(Connection* c);
  void ArmTimer();
  void ArmWake();

  void HandleCqe(const io_uring_cqe* cqe);
  void OnAccept(int which, int res, bool more);
  // A TLS connection's received bytes: decrypted into the parser. False: it was closed.
  bool ReceiveTls(Connection* c, const char* data, size_t n);
  // A TLS connection's `out`, encrypted into `sending` (and close_notify when it is done).
  void SealTls(Connection* c);
  void OnRecv(Connection* c, const io_uring_cqe* cqe);
  void OnSend(Connection* c, int res);
  void OnTimer();
  void OnWake();

  void ProcessInput(Connection* c);
  void MarkDirty(Connection* c);
  // A command's reply is complete: its metrics, and the slow-command log line.
  void CommandDone(const Connection* c, const queue::CommandSpec* spec, int64_t start_us,
                   std::string_view reply, bool blocking);
  void FlushDirty();
  void StartSend(Connection* c);
  // An internal connection whose commands are all answered hands its replies over and closes.
  void CompleteInternal(Connection* c);
  void Drain(Connection* c);     // answer what is owed, then close
  void CloseNow(Connection* c);  // drop the connection at once
  void ReleaseIfDone(Connection* c);
  // With auth.required: the session's authentication changed while a command ran.
  void NoteAuthChange(Connection* c);
  // Closes this loop's oldest unauthenticated connection (the share of them is full).
  void EvictOldestUnauthenticated();
  // With auth.required: closes the connections unauthenticated for longer than auth.timeout.
  void ExpireUnauthenticated();
  // Puts a new connection in a free slot (or a new one) with a new generation; counts it live.
  Connection* Adopt(std::unique_ptr<Connection> conn);
  // The live connection in `slot` of generation `gen`, or nullptr.
  Connection* Find(uint32_t slot, uint32_t gen) const;
  void BeginShutdown();
  void RunMailbox(Mailbox::Batch& batch);
  // A loop's part of `fanout` is in; the last one sends the answer to the asking loop.
  void ArriveClientsQuery(const std::shared_ptr<ClientsFanout>& fanout);
  void FormatClient(const Connection& c, int64_t now_ms, std::string* out) const;

  LoopHost& server_;
  const int index_;
  bool ring_ready_ = false;
  Listening listeners_[2];
  std::string tls_plain_;  // scratch: what one receive decrypted
  int wake_fd_ = -1;
  uint64_t wake_value_ = 0;
  uint32_t next_gen_ = 1;
  static thread_local EventLoop* current_;
  __kernel_timespec tick_{};
  std::atomic<bool> stop_requested_{false};
  bool stopping_ = false;
  int64_t stop_deadline_ms_ = 0;
  int64_t next_idle_scan_ms_ = 0;

  std::vector<std::unique_ptr<Connection>> conns_;  // by slot; null = free
  std::vector<uint32_t> free_slots_;
  size_t live_ = 0;
  // auth.required: connections not authenticated yet, oldest first as (slot, gen) (entries of
  // connections that authenticated or left are dropped when met), how many there are, and how
  // many this loop allows (a quarter of max_clients over the loops, at least 1).
  const bool auth_gate_;
  const size_t max_unauthenticated_;
  const int64_t auth_timeout_ms_;
  struct UnauthenticatedEntry {
    uint32_t slot;
    uint32_t gen;
    int64_t since_ms;  // the connection's accepted_ms when this entry was made
  };
  std::deque<UnauthenticatedEntry> unauthenticated_;
  // The connection `e` stands for while it is still open and unauthenticated, or nullptr.
  Connection* Unauthenticated(const UnauthenticatedEntry& e) const;
  size_t unauthenticated_count_ = 0;
  std::vector<std::pair<uint32_t, uint32_t>> dirty_;  // (slot, gen)
  // Lingering and closed connections the tick looks at (slot, gen), and the tick's scratch copy.
  std::vector<std::pair<uint32_t, uint32_t>> watched_;
  std::vector<std::pair<uint32_t, uint32_t>> watched_scratch_;
  std::vector<std::pair<uint32_t, uint32_t>> resume_;  // connections with commands to run again

  std::unique_ptr<queue::Service> service_;       // this thread's queue room (queue/service.h)
  Connection* running_ = nullptr;                 // connection whose command is being dispatched
  bool running_deferred_ = false;                 // that command called Defer()
  queue::CommandContext* running_ctx_ = nullptr;  // its context (which command, for metrics)
  int64_t running_start_us_ = 0;                  // when it was dispatched
  const bool metrics_;        // server.metrics_listen is on: commands are timed and counted
  const int64_t slowlog_us_;  // server.slowlog_ms in us; 0 = commands are not logged as slow
  const bool timed_;          // metrics_ or slowlog_us_: commands are timed
  proto::ReplyWriter begin_writer_{nullptr, 2};

  std::unique_ptr<Mailbox> mailbox_;
  Mailbox::Batch mailbox_batch_;  // reused by OnWake
  size_t queries_in_flight_ = 0;  // clients queries this loop started and has not answered

  LoopStats stats_;
  std::unique_ptr<HttpListener> http_;  // loop 0 serves server.metrics_listen
};

}  // namespace deferq::net
