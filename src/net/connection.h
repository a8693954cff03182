// One client connection as its loop thread sees it: socket, request parser, output buffers and
// the session the command handlers work on.
//
// Output is double buffered so that exactly one send is in flight per socket (two in-flight
// sends may complete out of order): replies are appended to `out` while `sending` is on the
// wire; when that send completes the buffers swap.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "io/tls.h"
#include "proto/request_parser.h"
#include "queue/context/session.h"

namespace deferq::queue {
struct CommandSpec;
}

namespace deferq::net {

enum class ConnState : uint8_t {
  kOpen,      // reading and answering requests
  kDraining,  // no more requests are read; owed replies are still written
  kLinger,    // everything written and FIN sent; input is discarded until EOF or a deadline, so
              // the peer reads our last reply instead of a reset
  kClosed,    // shut down; waiting for in-flight operations before the fd is closed
};

// A reply owed by a command still waiting for Redis (or blocked in CONSUME), or a finished reply
// queued behind such a one: replies leave strictly in request order.
struct PendingReply {
  uint64_t seq = 0;
  bool done = false;
  bool blocking = false;
  // The protocol in force when the command was read: a reply written later keeps it even if a
  // HELLO or RESET read after the command changed the connection's protocol.
  int resp = 2;
  std::string data;
  const queue::CommandSpec* spec = nullptr;  // the command owing it, for its metrics
  int64_t start_us = 0;                      // when that command was dispatched
};

// An internal connection's end (EventLoop::RunInternal): every reply of its commands in order
// (RESP2) and the session as they left it; ok is false when it was closed first (shutdown, the
// output limit, idle_timeout).
using InternalDone =
    std::function<void(bool ok, std::string replies, const queue::Session& session)>;

struct Connection {
  explicit Connection(const proto::ParserLimits& limits) : parser(limits) {}

  int fd = -1;
  uint32_t slot = 0;
  uint32_t gen = 0;
  ConnState state = ConnState::kOpen;
  int ops = 0;  // io_uring operations in flight that name this connection
  bool recv_armed = false;
  bool send_inflight = false;
  bool dirty = false;  // has output to start sending at the end of this loop iteration

  proto::RequestParser parser;
  std::string out;      // replies not yet handed to the kernel
  std::string sending;  // the buffer of the send in flight
  size_t send_off = 0;  // bytes of `sending` already written
  // Accepted on tls.listen: received bytes are decrypted before the parser sees them, and `out`
  // is encrypted into `sending` (which then holds records, not replies).
  std::unique_ptr<io::TlsStream> tls;
  bool tls_closed = false;  // close_notify queued

  queue::Session session;
  // An internal connection (EventLoop::RunInternal): no socket (fd -1), not in CLIENT LIST nor
  // max_clients; its commands were fed to the parser at once and `internal_done` gets the
  // replies once every one is answered.
  bool internal = false;
  InternalDone internal_done;

  std::deque<PendingReply> pending;  // oldest first
  uint64_t next_seq = 1;
  bool blocked = false;     // a blocking command is owed: read no further commands
  bool in_process = false;  // ProcessInput is running for this connection

  // Descriptive fields for CLIENT LIST/INFO (read by the owning loop only, like everything here:
  // other loops ask it for a snapshot by message).
  std::string addr;
  std::string laddr;
  int64_t created_ms = 0;
  int64_t accepted_ms = 0;  // monotonic, for the auth deadline
  char last_cmd[24] = "NULL";
  int64_t last_active_ms = 0;
  int64_t linger_deadline_ms = 0;

  size_t PendingOutput() const { return out.size() + (sending.size() - send_off); }
};

}  // namespace deferq::net
