#include "persist/endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <cstring>

namespace deferq::persist {

bool NumericEndpoint(const std::string& host, uint16_t port, Endpoint* out) {
  Endpoint ep;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ep.addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ep.addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    ep.addr_len = sizeof(sockaddr_in);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    ep.addr_len = sizeof(sockaddr_in6);
  } else {
    return false;
  }
  ep.host = host;
  ep.port = port;
  *out = std::move(ep);
  return true;
}

bool ResolveEndpoint(const std::string& host, uint16_t port, Endpoint* out, std::string* error) {
  addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    *error = gai_strerror(rc);
    return false;
  }
  char numeric[INET6_ADDRSTRLEN] = "";
  getnameinfo(res->ai_addr, res->ai_addrlen, numeric, sizeof(numeric), nullptr, 0, NI_NUMERICHOST);
  Endpoint ep;
  memcpy(&ep.addr, res->ai_addr, res->ai_addrlen);
  ep.addr_len = res->ai_addrlen;
  ep.host = numeric;
  ep.port = port;
  freeaddrinfo(res);
  *out = std::move(ep);
  return true;
}

}  // namespace deferq::persist
