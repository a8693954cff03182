// The console (server.console = true): HTML pages under /console on the metrics listener,
// rendered here from deferq's own figures (the per-queue job figures the stats poller keeps, the
// lateness histograms, the pools' state): opening a page costs Redis nothing. Pure: a parsed
// request in, a response out; net/http_listener.cc does the I/O.
//
// Authentication: nothing but the login page is served to a browser without a session. The
// admin password (auth.admin_password_env) opens a session: a cookie signed with a key random per
// process (HMAC-SHA256; HttpOnly, SameSite=Strict, 8 hours), so a restart logs everyone out.
// Every POST carries a token derived from the session (a cross-site form cannot know it) besides
// SameSite. Failed logins are logged and slowed down per instance.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deferq::net {

class LoopHost;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query
  std::string query;   // after '?', undecoded
  std::string cookie;  // the Cookie header
  std::string body;    // a form: application/x-www-form-urlencoded
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/html; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

// "a%20b+c" -> "a b c"; malformed escapes are kept as they are.
std::string FormDecode(std::string_view text);
// The value of `name` in a form or query string ("a=1&b=2"), decoded; empty when absent.
std::string FormValue(std::string_view form, std::string_view name);
// Text made safe inside HTML (& < > " ').
std::string HtmlEscape(std::string_view text);

class Console {
 public:
  static constexpr int64_t kSessionMs = 8 * 3600 * 1000;
  static constexpr size_t kPageSize = 100;

  explicit Console(LoopHost& server);

  // Whether `path` is the console's ("/console" and below).
  static bool Owns(std::string_view path);
  HttpResponse Handle(const HttpRequest& request, int64_t now_wall_ms);

 private:
  std::string Sign(std::string_view what) const;  // hex HMAC-SHA256 with key_
  // The session of the request's cookie, "" when none is valid now.
  std::string SessionOf(const HttpRequest& request, int64_t now_wall_ms) const;
  std::string CsrfToken(std::string_view session) const;

  HttpResponse LoginPage(std::string_view message, int status) const;
  HttpResponse Login(const HttpRequest& request, int64_t now_wall_ms);
  HttpResponse Overview(const HttpRequest& request, std::string_view session, int64_t now_wall_ms);
  static HttpResponse Redirect(std::string_view to);

  LoopHost& server_;
  std::array<unsigned char, 32> key_{};
  // Failed logins: after each, the next attempt is refused until this time (doubling, at most
  // 5 s), so guessing the password through the console is slow.
  int64_t next_login_ms_ = 0;
  int64_t login_penalty_ms_ = 0;
};

}  // namespace deferq::net
