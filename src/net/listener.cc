#include "net/listener.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/log.h"

namespace deferq::net {

namespace {

int Bind(const std::string& host, uint16_t port, bool reuseport, std::string* error,
         int* error_number = nullptr) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    *error = "cannot listen on " + where + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  std::string last_error = "no address";
  int last_errno = 0;
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      last_error = strerror(errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && (!reuseport || listen(fd, 4096) == 0)) {
      break;
    }
    last_errno = errno;
    last_error = strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) *error = "cannot listen on " + where + ": " + last_error;
  if (error_number != nullptr) *error_number = fd < 0 ? last_errno : 0;
  return fd;
}

}  // namespace

int OpenListener(const std::string& host, uint16_t port, std::string* error) {
  return Bind(host, port, /*reuseport=*/true, error);
}

int OpenExclusiveListener(const std::string& host, uint16_t port, std::string* error) {
  const int fd = Bind(host, port, /*reuseport=*/false, error);
  if (fd >= 0 && listen(fd, 128) != 0) {
    *error = "cannot listen on " + host + ":" + std::to_string(port) + ": " + strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

bool CheckPortFree(const std::string& host, uint16_t port, std::string* error) {
  const int fd = Bind(host, port, /*reuseport=*/false, error);
  if (fd < 0) return false;
  close(fd);
  return true;
}

bool WaitForPortFree(const std::string& host, uint16_t port, int64_t wait_ms, std::string* error) {
  constexpr int64_t kPollMs = 20;
  bool said = false;
  for (int64_t waited = 0;; waited += kPollMs) {
    int err = 0;
    const int fd = Bind(host, port, /*reuseport=*/false, error, &err);
    if (fd >= 0) {
      close(fd);
      return true;
    }
    if (err != EADDRINUSE || waited >= wait_ms) return false;
    if (!said) {
      DQ_LOG(kWarning, "%s:%u is in use; waiting up to %lld ms for it to be released", host.c_str(),
             port, static_cast<long long>(wait_ms));
      said = true;
    }
    usleep(kPollMs * 1000);  // main thread, before any loop runs: blocking is fine here
  }
}

std::string SocketAddress(int fd, bool peer) {
  sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                : getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (rc != 0) return "?:0";
  // Formatted into one buffer: GCC 12 at -O3 warns (-Wrestrict, a false positive) on the
  // std::string concatenation this once was.
  char ip[INET6_ADDRSTRLEN] = "?";
  char out[INET6_ADDRSTRLEN + 16];
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
    std::snprintf(out, sizeof(out), "%s:%u", ip, unsigned{ntohs(in->sin_port)});
    return out;
  }
  if (ss.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
    std::snprintf(out, sizeof(out), "[%s]:%u", ip, unsigned{ntohs(in6->sin6_port)});
    return out;
  }
  return "?:0";
}

}  // namespace deferq::net
