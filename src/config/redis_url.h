// Upstream addresses: "redis://[user:password@]host:port[/db]", the same with "rediss://" (TLS)
// and "host:port".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deferq {

struct RedisUrl {
  std::string host;
  uint16_t port = 6379;
  std::string user;      // empty: none
  std::string password;  // empty: none
  int db = 0;
  bool tls = false;  // rediss://
};

// Accepts "redis://..." and "rediss://..." URLs and bare "host:port" ("[::1]:6379" for IPv6).
// Returns false with a one-line reason in *error when the text is not an address.
bool ParseRedisUrl(std::string_view text, RedisUrl* out, std::string* error);

}  // namespace deferq
