#include "raw_connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace deferq::testing {

namespace {

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

RawConnection::RawConnection(uint16_t port, int receive_buffer) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) {
    connect_errno_ = errno;
    return;
  }
  if (receive_buffer > 0) {
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) connect_errno_ = errno;
  // Tests that split a command over many writes need each write to leave at once.
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

RawConnection::~RawConnection() { Close(); }

void RawConnection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

uint16_t RawConnection::local_port() const {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  return ntohs(addr.sin_port);
}

int RawConnection::Send(std::string_view data, std::chrono::milliseconds timeout) {
  return SendImpl(data, timeout, /*read_meanwhile=*/true);
}

int RawConnection::SendWithoutReading(std::string_view data, std::chrono::milliseconds timeout) {
  return SendImpl(data, timeout, /*read_meanwhile=*/false);
}

int RawConnection::SendImpl(std::string_view data, std::chrono::milliseconds timeout,
                            bool read_meanwhile) {
  if (!connected()) return ENOTCONN;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!data.empty()) {
    ssize_t n = ::send(fd_, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return errno;
    // POLLRDHUP: a peer that closed while our data waits on its zero window sends no RST until
    // we write again, which we cannot; its FIN is visible without reading, though.
    pollfd pfd{
        fd_,
        static_cast<short>(POLLOUT | POLLRDHUP | (read_meanwhile && !peer_closed_ ? POLLIN : 0)),
        0};
    int ready = ::poll(&pfd, 1, RemainingMs(deadline));
    if (ready == 0) return ETIMEDOUT;
    if (ready < 0 && errno != EINTR) return errno;
    bool hung_up = pfd.revents & (POLLRDHUP | POLLHUP | POLLERR);
    // When reading, take in what the peer sent before its FIN first.
    if (hung_up && (!read_meanwhile || peer_closed_)) return ESHUTDOWN;
    if (read_meanwhile && (pfd.revents & POLLIN)) {
      char chunk[65536];
      ssize_t got = ::recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
      if (got > 0) buffer_.append(chunk, got);
      if (got == 0) peer_closed_ = true;
      if (got < 0 && errno != EAGAIN && errno != EINTR) return errno;
    }
  }
  return 0;
}

void RawConnection::ShutdownWrite() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

bool RawConnection::Fill(std::chrono::steady_clock::time_point deadline, End* end) {
  if (peer_closed_) {
    *end = End::kClosed;
    return false;
  }
  pollfd pfd{fd_, POLLIN, 0};
  int ready = ::poll(&pfd, 1, RemainingMs(deadline));
  if (ready <= 0) {
    *end = End::kTimeout;
    return false;
  }
  char chunk[65536];
  ssize_t got = ::recv(fd_, chunk, sizeof chunk, MSG_DONTWAIT);
  if (got > 0) {
    buffer_.append(chunk, got);
    return true;
  }
  if (got == 0) {
    peer_closed_ = true;
    *end = End::kClosed;
    return false;
  }
  if (errno == EAGAIN || errno == EINTR) return true;
  *end = End::kReset;
  peer_closed_ = true;
  return false;
}

std::string RawConnection::ReadReplies(size_t count, std::chrono::milliseconds timeout,
                                       std::vector<RespValue>* values) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string out;
  size_t offset = 0;  // parsed so far in buffer_
  while (count > 0) {
    RespValue value;
    size_t consumed = 0;
    ParseStatus status = ParseReply(std::string_view(buffer_).substr(offset), &value, &consumed);
    if (status == ParseStatus::kOk) {
      offset += consumed;
      if (values) values->push_back(std::move(value));
      --count;
      continue;
    }
    if (status == ParseStatus::kMalformed) break;
    End end;
    if (!Fill(deadline, &end)) break;
  }
  out = buffer_.substr(0, offset);
  buffer_.erase(0, offset);
  return out;
}

std::optional<RespValue> RawConnection::ReadReply(std::chrono::milliseconds timeout,
                                                  std::string* raw) {
  std::vector<RespValue> values;
  std::string bytes = ReadReplies(1, timeout, &values);
  if (raw) *raw = bytes;
  if (values.empty()) return std::nullopt;
  return std::move(values.front());
}

std::string RawConnection::Exchange(std::string_view request, size_t count,
                                    std::chrono::milliseconds timeout) {
  if (Send(request, timeout) != 0) return ReadReplies(count, 0ms);
  return ReadReplies(count, timeout);
}

std::string RawConnection::ReadUntilClosed(std::chrono::milliseconds timeout, End* end) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  End how = End::kTimeout;
  while (Fill(deadline, &how)) {
  }
  if (end) *end = how;
  std::string out = std::move(buffer_);
  buffer_.clear();
  return out;
}

size_t CountReplies(std::string_view bytes, std::vector<RespValue>* values) {
  size_t count = 0;
  while (!bytes.empty()) {
    RespValue value;
    size_t consumed = 0;
    if (ParseReply(bytes, &value, &consumed) != ParseStatus::kOk) break;
    bytes.remove_prefix(consumed);
    if (values) values->push_back(std::move(value));
    ++count;
  }
  return count;
}

std::string EncodeCommand(const std::vector<std::string>& args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const std::string& arg : args) {
    out += "$" + std::to_string(arg.size()) + "\r\n";
    out += arg;
    out += "\r\n";
  }
  return out;
}

}  // namespace deferq::testing
