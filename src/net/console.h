// The console (server.console = true): HTML pages under /console on the metrics listener
// (docs/console.md). The overview is rendered from deferq's own figures (the per-queue job
// figures the stats poller keeps, the lateness histograms, the pools' state): it costs Redis
// nothing. A queue's page, a job and every action run deferq commands with the identity of the
// page's login, as an internal connection of loop 0 would (EventLoop::RunInternal): the same
// checks, namespace binding and one-function-call state changes as a client's, a few bounded
// commands per page. Pure apart from that: a parsed request in, a response out (at once or once
// the commands answered); net/http_listener.cc does the I/O.
//
// Authentication: nothing but the login page is served to a browser without a session. The
// admin password (auth.admin_password_env) opens a session that sees everything; a namespace's
// token (with auth.required) one that sees that namespace only. The session is a cookie signed
// with a key random per process (HMAC-SHA256; HttpOnly, SameSite=Strict, 8 hours), so a restart
// logs everyone out; a namespace session carries its token's digest and stops working when the
// token is revoked. Every POST carries a token derived from the session (a cross-site form
// cannot know it) besides SameSite. Failed logins are logged and slowed down per instance.
// server.console_read_only serves the pages without any action.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "persist/reply_view.h"

namespace deferq::queue {
struct Session;
struct QueueStatsSnapshot;
}  // namespace deferq::queue

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
// Every value of `name` in a form ("id=a&id=b"), decoded, in order.
std::vector<std::string> FormValues(std::string_view form, std::string_view name);
// Text made safe inside HTML (& < > " ').
std::string HtmlEscape(std::string_view text);
// Text made safe inside a URL's query: everything but [A-Za-z0-9_.~-] percent-encoded.
std::string UrlEncode(std::string_view text);
// A job's payload (or result) for a page: text when it is UTF-8 without control characters
// (other than tab and newline), else hex; at most `limit` bytes of it, and says so.
std::string ShowBytes(std::string_view bytes, size_t limit);

// Runs RESP requests with a session's identity and hands over their replies (RESP2, in order),
// or ok = false (EventLoop::RunInternal).
using ConsoleRun = std::function<void(
    const queue::Session& session, std::string_view commands,
    std::function<void(bool ok, std::string replies, const queue::Session& session)> done)>;
using ConsoleRespond = std::function<void(HttpResponse)>;

class Console {
 public:
  static constexpr int64_t kSessionMs = 8 * 3600 * 1000;
  static constexpr size_t kPageSize = 100;
  // Jobs listed per state on a queue's page, and dead letters read at most for a filter.
  static constexpr size_t kJobsShown = 50;
  static constexpr size_t kDeadRead = 1000;
  // The last page of the ready jobs and of the dead letters (pages of kJobsShown, 0-based): both
  // are read from their list's head, kDeadRead deep at most.
  static constexpr size_t kLastPage = kDeadRead / kJobsShown - 1;
  // Payload bytes shown on a job's page.
  static constexpr size_t kPayloadShown = 4096;

  Console(LoopHost& server, ConsoleRun run);

  // Whether `path` is the console's ("/console" and below).
  static bool Owns(std::string_view path);
  // Answers through `respond`: at once, or once the page's commands answered (on this thread).
  void Handle(const HttpRequest& request, int64_t now_wall_ms, ConsoleRespond respond);

  // A login: what the signed cookie says.
  struct Login {
    std::string signed_part;  // "<expires>.admin" or "<expires>.ns.<digest>.<namespace>"
    bool admin = false;
    std::string ns;      // a namespace login's namespace
    std::string digest;  // and its token's SHA-256 (hex)
  };

 private:
  using Replies = persist::ReplyList;
  using Then = std::function<void(Replies* replies)>;  // nullptr: the commands failed

  std::string Sign(std::string_view what) const;  // hex HMAC-SHA256 with key_
  // The login of the request's cookie; false when none is valid now.
  bool LoginOf(const HttpRequest& request, int64_t now_wall_ms, Login* out) const;
  std::string CsrfToken(std::string_view session) const;
  // Runs `commands` in namespace `ns` as `login`, then `then` with their replies.
  void Run(const Login& login, const std::string& ns,
           const std::vector<std::vector<std::string>>& commands, Then then);

  HttpResponse LoginPage(std::string_view message, int status) const;
  void LogIn(const HttpRequest& request, int64_t now_wall_ms, ConsoleRespond respond);
  HttpResponse Opened(const std::string& signed_part) const;
  HttpResponse Refused(int64_t now_wall_ms, std::string_view who);
  HttpResponse Overview(const HttpRequest& request, const Login& login, int64_t now_wall_ms);
  void QueuePage(const HttpRequest& request, const Login& login, int64_t now_wall_ms,
                 ConsoleRespond respond);
  void JobPage(const HttpRequest& request, const Login& login, ConsoleRespond respond);
  void Act(const HttpRequest& request, const Login& login, ConsoleRespond respond);
  // The page's header: title, who is logged in, log out.
  std::string Header(const Login& login, std::string_view title) const;
  static HttpResponse Redirect(std::string_view to);
  static HttpResponse Text(int status, std::string_view text);
  // A command's error reply as a page: NOAUTH (a revoked token) ends the login.
  static HttpResponse Failed(std::string_view error);
  // Whether `login` may see namespace `ns` (answers 403 into *r when not).
  static bool MaySee(const Login& login, const std::string& ns, HttpResponse* r);

  LoopHost& server_;
  ConsoleRun run_;
  // The stats snapshot the overview showed last, and the one before it: the rates per queue.
  std::shared_ptr<const queue::QueueStatsSnapshot> seen_;
  std::shared_ptr<const queue::QueueStatsSnapshot> before_;
  std::array<unsigned char, 32> key_{};
  // Failed logins: after each, the next attempt is refused until this time (doubling, at most
  // 5 s), so guessing the password through the console is slow.
  int64_t next_login_ms_ = 0;
  int64_t login_penalty_ms_ = 0;
};

}  // namespace deferq::net
