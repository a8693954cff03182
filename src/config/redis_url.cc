// Parsing of upstream Redis addresses.
//
// Grammar (a strict subset of the redis:// URI scheme registered with IANA):
//   url      = ( "redis://" | "rediss://" ) [ userinfo "@" ] hostport [ "/" [ db ] ]
//   bare     = hostport-with-required-port
//   userinfo = user ":" password | ":" password      (percent-encoded)
//   hostport = ( name | "[" ipv6 "]" ) [ ":" port ]
// Anything else (a query string, a second path segment, spaces) is rejected rather than ignored:
// a silently dropped "?db=3" would point deferq at the wrong database.
#include "config/redis_url.h"

#include <arpa/inet.h>

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "base/ascii.h"

namespace deferq {
namespace {

bool Fail(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return false;
}

bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes %XX escapes. `what` names the field in the error ("user name", "password").
bool PercentDecode(std::string_view in, std::string_view what, std::string* out,
                   std::string* error) {
  out->clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out->push_back(in[i]);
      continue;
    }
    if (i + 2 >= in.size() || HexValue(in[i + 1]) < 0 || HexValue(in[i + 2]) < 0) {
      return Fail(error, "bad percent-escape in " + std::string(what));
    }
    out->push_back(static_cast<char>(HexValue(in[i + 1]) * 16 + HexValue(in[i + 2])));
    i += 2;
  }
  return true;
}

// A host name or IPv4 address: letters, digits, '-', '.', '_'.
bool IsHostNameChar(char c) {
  return IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '-' || c == '.' || c == '_';
}

// Parses the decimal port in `text` (the part after ':').
bool ParsePort(std::string_view text, uint16_t* port, std::string* error) {
  size_t digits = 0;
  while (digits < text.size() && IsAsciiDigit(text[digits])) ++digits;
  if (digits == 0) {
    if (text.empty()) return Fail(error, "missing port after ':'");
    return Fail(error, "port '" + std::string(text) + "' is not a number");
  }
  if (digits < text.size()) {
    return Fail(error, "unexpected '" + std::string(text.substr(digits)) + "' after the port");
  }
  uint32_t value = 0;
  for (char c : text) {
    value = value * 10 + static_cast<uint32_t>(c - '0');
    // Stop before uint32_t can wrap; anything this large is out of range anyway.
    if (value > 65535) break;
  }
  if (value == 0 || value > 65535) {
    return Fail(error, "port '" + std::string(text) + "' is out of range (1-65535)");
  }
  *port = static_cast<uint16_t>(value);
  return true;
}

// Parses "host[:port]" or "[ipv6][:port]" filling out->host and out->port.
bool ParseHostPort(std::string_view text, bool port_required, RedisUrl* out, std::string* error) {
  std::string_view host;
  std::string_view rest;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return Fail(error, "missing ']' after IPv6 address");
    host = text.substr(1, close - 1);
    rest = text.substr(close + 1);
    if (host.empty()) return Fail(error, "empty host");
    std::string copy(host);
    in6_addr addr;
    if (inet_pton(AF_INET6, copy.c_str(), &addr) != 1) {
      return Fail(error, "'" + copy + "' is not an IPv6 address");
    }
  } else {
    size_t colon = text.find(':');
    host = text.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : text.substr(colon);
    if (host.empty()) return Fail(error, "empty host");
    for (char c : host) {
      if (!IsHostNameChar(c)) {
        if (c == '@') return Fail(error, "credentials need the redis:// form");
        if (c == '/') return Fail(error, "a database number needs the redis:// form");
        return Fail(error, "invalid character '" + std::string(1, c) + "' in host");
      }
    }
  }
  out->host = std::string(host);
  if (rest.empty()) {
    if (port_required) return Fail(error, "missing port (expected host:port)");
    return true;
  }
  if (rest.front() != ':') {
    return Fail(error, "unexpected '" + std::string(rest) + "' after host");
  }
  return ParsePort(rest.substr(1), &out->port, error);
}

// Parses the optional "/db" tail of a URL (`path` starts with '/' or is empty).
bool ParseDb(std::string_view path, int* db, std::string* error) {
  if (path.empty() || path == "/") return true;
  std::string_view digits = path.substr(1);
  for (char c : digits) {
    if (!IsAsciiDigit(c)) {
      if (c == '/' || c == '?' || c == '#') {
        return Fail(error, "unexpected '" + std::string(digits.substr(digits.find(c))) +
                               "' after the database number");
      }
      return Fail(error, "database '" + std::string(digits) + "' is not a non-negative integer");
    }
  }
  int value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    return Fail(error, "database '" + std::string(digits) + "' is out of range");
  }
  *db = value;
  return true;
}

// Splits "user:password" (or ":password") into decoded parts.
bool ParseUserInfo(std::string_view info, RedisUrl* out, std::string* error) {
  size_t colon = info.find(':');
  // Redis AUTH takes a password alone or a user with a password, never a user alone; a bare
  // "name@" is more likely a password missing its ':' than a user without one, so refuse it.
  if (colon == std::string_view::npos) {
    return Fail(error, "credentials must be 'user:password@' or ':password@'");
  }
  if (!PercentDecode(info.substr(0, colon), "user name", &out->user, error)) return false;
  if (!PercentDecode(info.substr(colon + 1), "password", &out->password, error)) return false;
  if (out->password.empty()) return Fail(error, "empty password");
  return true;
}

}  // namespace

bool ParseRedisUrl(std::string_view text, RedisUrl* out, std::string* error) {
  if (text.empty()) return Fail(error, "empty address");
  RedisUrl url;

  // A scheme is letters (then letters, digits, '+', '-', '.') followed by "://".
  size_t sep = text.find("://");
  bool has_scheme = sep != std::string_view::npos && sep > 0 && IsAsciiAlpha(text[0]);
  for (size_t i = 1; has_scheme && i < sep; ++i) {
    char c = text[i];
    has_scheme = IsAsciiAlpha(c) || IsAsciiDigit(c) || c == '+' || c == '-' || c == '.';
  }

  if (!has_scheme) {
    if (!ParseHostPort(text, /*port_required=*/true, &url, error)) return false;
    *out = std::move(url);
    return true;
  }

  std::string scheme = base::AsciiLower(text.substr(0, sep));
  if (scheme != "redis" && scheme != "rediss") {
    return Fail(error, "unknown scheme '" + scheme + "://' (expected redis:// or rediss://)");
  }
  url.tls = scheme == "rediss";

  std::string_view rest = text.substr(sep + 3);
  size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view path = slash == std::string_view::npos ? std::string_view() : rest.substr(slash);

  // The last '@' ends the credentials, so an unencoded '@' inside a password still works.
  size_t at = authority.rfind('@');
  if (at != std::string_view::npos) {
    if (!ParseUserInfo(authority.substr(0, at), &url, error)) return false;
    authority = authority.substr(at + 1);
  }
  if (authority.empty()) return Fail(error, "empty host");
  if (!ParseHostPort(authority, /*port_required=*/false, &url, error)) return false;
  if (!ParseDb(path, &url.db, error)) return false;
  *out = std::move(url);
  return true;
}

}  // namespace deferq
