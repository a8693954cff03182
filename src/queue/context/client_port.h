// How a command handler reaches the connection it runs for beyond the immediate reply: replies
// written later (after an upstream round trip, or when a blocked CONSUME is served). Implemented
// by the net room; the queue room never sees the socket.
#pragma once

#include <cstdint>
#include <string_view>

#include "proto/reply_writer.h"

namespace deferq::queue {

// A reply a command owes. Completing it after the client left is a harmless no-op.
struct ReplyTicket {
  uint32_t slot = 0;
  uint32_t gen = 0;
  uint64_t seq = 0;
  uint64_t client_id = 0;
};

class ClientPort {
 public:
  // Reserves the reply of the command being run; replies of later pipelined commands wait behind
  // it. blocking: the connection reads no further commands until this reply is written (as a
  // Redis client blocked in BLPOP does).
  virtual ReplyTicket Defer(bool blocking) = 0;
  // The writer for a reserved reply, or nullptr when the client is gone. Write exactly one reply,
  // then call Finish.
  virtual proto::ReplyWriter* Begin(const ReplyTicket& ticket) = 0;
  virtual void Finish(const ReplyTicket& ticket) = 0;
  // False once the client that owes `ticket` is gone (its Session with it).
  virtual bool Connected(const ReplyTicket& ticket) const = 0;

 protected:
  ~ClientPort() = default;
};

// A reply a command owes, as one value its callbacks carry: Owe reserves it (Defer); Write
// writes it through `fill` and settles it, or does nothing at all when the client is gone (the
// port settled it then: neither a write nor Finish may follow).
struct OwedReply {
  ClientPort* port = nullptr;
  ReplyTicket ticket;

  static OwedReply Owe(ClientPort* port, bool blocking) { return {port, port->Defer(blocking)}; }
  // False when the client was gone (nothing written).
  template <typename Fill>
  bool Write(Fill&& fill) const {
    proto::ReplyWriter* out = port->Begin(ticket);
    if (out == nullptr) return false;
    fill(*out);
    port->Finish(ticket);
    return true;
  }
  void Error(std::string_view error) const {
    Write([error](proto::ReplyWriter& w) { w.Error(error); });
  }
};

}  // namespace deferq::queue
