#include "persist/blocking_link.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "persist/reply_reader.h"
#include "proto/request_writer.h"

namespace deferq::persist {

void ReplyDeleter::operator()(redisReply* r) const { freeReplyObject(r); }

BlockingLink::~BlockingLink() {
  if (fd_ >= 0) close(fd_);
  if (reader_ != nullptr) redisReaderFree(reader_);
}

bool BlockingLink::Connect(const Endpoint& ep, int timeout_ms, std::shared_ptr<io::TlsContext> tls,
                           std::string_view peer_name, std::string* error) {
  fd_ = socket(ep.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0) {
    *error = std::string("socket failed: ") + strerror(errno);
    return false;
  }
  if (connect(fd_, reinterpret_cast<const sockaddr*>(&ep.addr), ep.addr_len) != 0) {
    if (errno != EINPROGRESS) {
      *error = strerror(errno);
      return false;
    }
    pollfd p{fd_, POLLOUT, 0};
    if (poll(&p, 1, timeout_ms) != 1) {
      *error = "connect timed out";
      return false;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd_, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      *error = strerror(err);
      return false;
    }
  }
  // Blocking from here, every read and write bounded by the timeout.
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  reader_ = NewReplyReader();
  if (tls == nullptr) return true;
  tls_ = std::make_unique<io::TlsStream>(std::move(tls), peer_name);
  while (!tls_->established()) {
    std::string hello;
    tls_->TakeOutput(&hello);
    if (!SendAll(hello, error) || !ReadSome(error)) return false;
  }
  return true;
}

bool BlockingLink::SendAll(std::string_view bytes, std::string* error) {
  while (!bytes.empty()) {
    const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? std::string("write timed out")
                                                                  : strerror(errno);
      return false;
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

bool BlockingLink::ReadSome(std::string* error) {
  char buf[16 * 1024];
  ssize_t n;
  do {
    n = recv(fd_, buf, sizeof(buf), 0);
  } while (n < 0 && errno == EINTR);
  if (n == 0) {
    *error = "connection closed";
    return false;
  }
  if (n < 0) {
    *error = errno == EAGAIN || errno == EWOULDBLOCK ? std::string("no answer in time")
                                                     : strerror(errno);
    return false;
  }
  if (tls_ == nullptr) {
    redisReaderFeed(reader_, buf, static_cast<size_t>(n));
    return true;
  }
  std::string plain;
  const bool ok = tls_->Receive(buf, static_cast<size_t>(n), &plain);
  std::string out;
  tls_->TakeOutput(&out);  // an alert, a ticket acknowledgement: sent as they come
  if (!out.empty()) SendAll(out, error);
  if (!ok) {
    *error = tls_->error();
    return false;
  }
  if (!plain.empty()) redisReaderFeed(reader_, plain.data(), plain.size());
  return true;
}

OwnedReply BlockingLink::Call(std::string_view request, std::string* error) {
  if (fd_ < 0 || reader_ == nullptr) {
    *error = "not connected";
    return nullptr;
  }
  if (tls_ != nullptr) {
    std::string sealed;
    if (!tls_->Write(request)) {
      *error = tls_->error();
      return nullptr;
    }
    tls_->TakeOutput(&sealed);
    if (!SendAll(sealed, error)) return nullptr;
  } else if (!SendAll(request, error)) {
    return nullptr;
  }
  for (;;) {
    void* obj = nullptr;
    if (redisReaderGetReply(reader_, &obj) != REDIS_OK) {
      *error = "protocol error";
      return nullptr;
    }
    if (obj != nullptr) return OwnedReply(static_cast<redisReply*>(obj));
    if (!ReadSome(error)) return nullptr;
  }
}

OwnedReply BlockingLink::Command(std::initializer_list<std::string_view> args, std::string* error) {
  std::string request;
  proto::AppendCommand(&request, args);
  return Call(request, error);
}

}  // namespace deferq::persist
