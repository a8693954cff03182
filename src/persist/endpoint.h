// Where an upstream connection connects. A standalone pool's address is fixed at startup; a
// Sentinel pool's is the master the Sentinels name, which changes on failover. UpstreamConnection
// asks an EndpointSource on every connect, and reconnects when its generation moves.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace deferq::persist {

struct Endpoint {
  sockaddr_storage addr{};
  socklen_t addr_len = 0;
  std::string host;  // numeric, for logs and INFO
  uint16_t port = 0;
};

// Fills *out from a numeric IPv4/IPv6 address (no name resolution: loop threads never block).
bool NumericEndpoint(const std::string& host, uint16_t port, Endpoint* out);
// Resolves a name with getaddrinfo (may block: startup on the main thread only). False with the
// resolver's message in *error.
bool ResolveEndpoint(const std::string& host, uint16_t port, Endpoint* out, std::string* error);

// Shared by the connections of one pool on every thread: implementations are thread-safe.
class EndpointSource {
 public:
  virtual ~EndpointSource() = default;
  // The address to connect to now. False with *why when none is known (the connection stays
  // down and its requests answer "TRYAGAIN pool '<name>' unavailable: <why>").
  virtual bool Current(Endpoint* out, std::string* why) const = 0;
  // Moves whenever Current() answers another address: connections made to an older one close
  // and reconnect at once.
  virtual uint64_t generation() const = 0;
  // A connection found the address unusable (refused by a check, not a master, unreachable):
  // the source should look again.
  virtual void Suspect() = 0;
};

}  // namespace deferq::persist
