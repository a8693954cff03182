// A loopback TCP client that works at the byte level, for tests where the client must misbehave
// (garbage, half-close, never reading) or where replies are compared byte for byte.
// Every call is bounded by a timeout; nothing here blocks forever.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "resp_reader.h"

namespace deferq::testing {

using namespace std::chrono_literals;

class RawConnection {
 public:
  // How a read that waits for the peer to close ended.
  enum class End { kClosed, kReset, kTimeout };

  // Connects to 127.0.0.1:port. `receive_buffer` > 0 sets SO_RCVBUF before connecting (to keep
  // the kernel from absorbing much of what a non-reading client is sent).
  explicit RawConnection(uint16_t port, int receive_buffer = 0);
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return fd_ >= 0 && connect_errno_ == 0; }
  int connect_errno() const { return connect_errno_; }
  int fd() const { return fd_; }
  uint16_t local_port() const;

  // Sends all of `data`, storing whatever arrives meanwhile (so a server that answers while we
  // send never deadlocks against us). Returns 0, or the errno that stopped it (EPIPE,
  // ECONNRESET, ESHUTDOWN when the peer closed while our data waited, ETIMEDOUT when the peer
  // did not take the data in time).
  int Send(std::string_view data, std::chrono::milliseconds timeout = 10s);
  // Like Send, but never reads: the client that does not read its replies. Returns ESHUTDOWN
  // when the peer closed the connection (its FIN arrived) while our data waited.
  int SendWithoutReading(std::string_view data, std::chrono::milliseconds timeout);
  void ShutdownWrite();
  void Close();

  // Reads exactly `count` complete replies and returns their bytes (fewer on timeout, close or
  // malformed input; check with `CountReplies`). Values go to `values` when given.
  std::string ReadReplies(size_t count, std::chrono::milliseconds timeout = 5s,
                          std::vector<RespValue>* values = nullptr);
  // One reply; nullopt on timeout, close or malformed input.
  std::optional<RespValue> ReadReply(std::chrono::milliseconds timeout = 5s,
                                     std::string* raw = nullptr);
  // Sends `request` and reads `count` replies.
  std::string Exchange(std::string_view request, size_t count,
                       std::chrono::milliseconds timeout = 5s);

  // Reads until the peer closes (or resets) the connection or the timeout passes; returns
  // everything received that was not consumed by an earlier read.
  std::string ReadUntilClosed(std::chrono::milliseconds timeout, End* end);

  // Bytes received and not consumed yet.
  const std::string& pending() const { return buffer_; }

 private:
  // Waits for readable data and appends it to buffer_. Returns false on close/reset/timeout
  // (recording which in *end).
  bool Fill(std::chrono::steady_clock::time_point deadline, End* end);
  int SendImpl(std::string_view data, std::chrono::milliseconds timeout, bool read_meanwhile);

  int fd_ = -1;
  int connect_errno_ = 0;
  bool peer_closed_ = false;
  std::string buffer_;
};

// Splits a byte stream into complete replies; returns how many parsed and leaves the rest.
size_t CountReplies(std::string_view bytes, std::vector<RespValue>* values = nullptr);

// Encodes a command as a RESP array of bulk strings.
std::string EncodeCommand(const std::vector<std::string>& args);

}  // namespace deferq::testing
