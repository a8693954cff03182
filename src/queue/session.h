// Per-connection state that command handlers read and change: protocol version, name,
// namespace binding, and what the connection must do once the current reply is written.
// The net room owns one Session per connection; the queue room never sees the socket.
#pragma once

#include <cstdint>
#include <string>

namespace deferq::queue {

struct Session {
  uint64_t id = 0;  // CLIENT ID; unique for the life of the process
  int resp = 2;     // 2 or 3 (after HELLO 3)
  std::string name;
  std::string ns = "default";      // namespace the connection works in
  bool authenticated = false;      // AUTH accepted
  bool admin = false;              // AUTH admin <password> accepted
  bool close_after_reply = false;  // QUIT: close once everything owed is written
};

}  // namespace deferq::queue
