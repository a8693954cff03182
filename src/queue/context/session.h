// Per-connection state that command handlers read and change: protocol version, name,
// namespace binding, and what the connection must do once the current reply is written.
// The net room owns one Session per connection; the queue room never sees the socket.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deferq::queue {

// Commands queued between MULTI and EXEC (docs/commands.md, connection commands).
struct Transaction {
  bool active = false;  // after MULTI, until EXEC, DISCARD or RESET
  bool failed = false;  // an error while queuing: EXEC answers -EXECABORT
  // The commands queued, and for each whether it takes several round trips (CommandSpec
  // multi_step: EXEC starts it alone).
  struct Queued {
    std::vector<std::string> args;
    bool multi_step = false;
  };
  std::vector<Queued> commands;
  size_t bytes = 0;  // argument bytes queued (bounded, see transaction.cc)
  void Clear() {
    active = failed = false;
    commands.clear();
    bytes = 0;
  }
};

struct Session {
  uint64_t id = 0;  // CLIENT ID; unique for the life of the process
  int resp = 2;     // 2 or 3 (after HELLO 3)
  std::string name;
  std::string ns = "default";  // namespace the connection works in
  bool authenticated = false;  // AUTH accepted
  uint32_t auth_failures = 0;  // failed AUTHs on this connection (queue/commands/auth_throttle.h)
  std::string peer_ip;         // the client's address without its port (set by net)
  bool admin = false;          // AUTH admin <password> accepted
  bool close_after_reply = false;  // QUIT: close once everything owed is written
  bool tracking = false;           // CLIENT TRACKING ON (nothing is ever invalidated)
  Transaction multi;
  // Token binding (queue/commands/auth.h): the digest of the token AUTH accepted, and until when
  // (monotonic ms) it was last found valid; past that the next job command checks it again.
  std::string token_digest;
  int64_t auth_valid_until_ms = 0;
  // A command that waits for a namespace lookup: the connection runs it again once the lookup
  // is in (replay_looked_up then lets it use the answer whatever its age).
  std::vector<std::string> replay;
  bool replay_looked_up = false;
};

}  // namespace deferq::queue
