#include "net/console.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <map>

#include "base/log.h"
#include "config/queue_tag.h"
#include "net/loop_host.h"
#include "persist/reply_view.h"
#include "queue/context/session.h"
#include "queue/model/queue_figures.h"
#include "queue/model/queue_name.h"
#include "queue/stats/lateness.h"
#include "queue/stats/queue_stats.h"

namespace deferq::net {

namespace {

constexpr std::string_view kCookie = "dq_console";
constexpr int64_t kMaxLoginPenaltyMs = 5000;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The page around `body`: no script, no external resource (works offline, nothing to inject).
std::string Page(std::string_view title, std::string_view body) {
  std::string out =
      "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>";
  out += HtmlEscape(title);
  out +=
      " - deferq</title><style>"
      "body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}"
      "table{border-collapse:collapse;margin:.5em 0}"
      "th,td{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:right}"
      "th:first-child,td:first-child,th:nth-child(2),td:nth-child(2){text-align:left}"
      "th{background:#f3f3f3}.bad{color:#b00020;font-weight:bold}.muted{color:#777}"
      "header{display:flex;gap:1em;align-items:baseline;justify-content:space-between}"
      "form.inline{display:inline}nav{margin:.5em 0}.note{background:#eef6ee;padding:.4em}"
      "pre{background:#f7f7f7;padding:.5em;white-space:pre-wrap;word-break:break-all}"
      "td.text{text-align:left;max-width:40em;overflow:hidden}"
      ".bar{display:inline-block;height:.8em;background:#4a7bd0}table.chart td{padding:.1em .6em}"
      "</style></head><body>";
  out += body;
  out += "</body></html>";
  return out;
}

std::string Cell(int64_t v) { return "<td>" + std::to_string(v) + "</td>"; }

// RESP requests: each command an array of bulk strings.
std::string EncodeCommands(const std::vector<std::vector<std::string>>& commands) {
  std::string out;
  for (const auto& args : commands) {
    out += "*" + std::to_string(args.size()) + "\r\n";
    for (const std::string& a : args) {
      out += "$" + std::to_string(a.size()) + "\r\n";
      out += a;
      out += "\r\n";
    }
  }
  return out;
}

using persist::ReplyView;

int64_t Int(ReplyView r) {
  int64_t v = 0;
  r.Int(&v);
  return v;
}

// The fields of a flat [name, value, ...] reply (QSTAT, JOB in RESP2).
std::map<std::string, ReplyView> Fields(ReplyView r) {
  std::map<std::string, ReplyView> out;
  if (!r.is_array()) return out;
  for (size_t i = 0; i + 1 < r.size(); i += 2) out[std::string(r[i].str())] = r[i + 1];
  return out;
}

// "2026-11-28 19:00:21.123 UTC"; "-" for 0.
std::string WallTime(int64_t ms) {
  if (ms <= 0) return "-";
  const time_t secs = static_cast<time_t>(ms / 1000);
  struct tm tm {};
  gmtime_r(&secs, &tm);
  char out[64];
  snprintf(out, sizeof(out), "%04d-%02d-%02d %02d:%02d:%02d.%03d UTC", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           static_cast<int>(ms % 1000));
  return out;
}

std::string QueueLink(std::string_view ns, std::string_view queue) {
  return "/console/queue?ns=" + deferq::net::UrlEncode(ns) +
         "&amp;q=" + deferq::net::UrlEncode(queue);
}

std::string Hidden(std::string_view name, std::string_view value) {
  return "<input type=\"hidden\" name=\"" + std::string(name) + "\" value=\"" +
         deferq::net::HtmlEscape(value) + "\">";
}

// A job of PEEK / DEADLETTER PEEK: [queue, id, payload, tries_left, ttl_left_s, attempt,
// elapsed_ms (, last_error, last_error_attempt, last_error_ms)].
struct JobRow {
  std::string id;
  std::string payload;
  int64_t tries_left = 0;
  int64_t attempt = 0;
  int64_t elapsed_ms = 0;
  std::string error;
  bool has_error = false;
  int64_t error_attempt = 0;
  int64_t error_ms = 0;
};

std::vector<JobRow> JobRows(ReplyView r) {
  std::vector<JobRow> out;
  if (!r.is_array()) return out;
  for (size_t i = 0; i < r.size(); ++i) {
    const ReplyView j = r[i];
    if (!j.is_array() || j.size() < 7) continue;
    JobRow row;
    row.id = j[1].str();
    row.payload = j[2].str();
    row.tries_left = Int(j[3]);
    row.attempt = Int(j[5]);
    row.elapsed_ms = Int(j[6]);
    if (j.size() >= 10) {
      row.has_error = j[7].is_string();
      row.error = j[7].str();
      row.error_attempt = Int(j[8]);
      row.error_ms = Int(j[9]);
    }
    out.push_back(std::move(row));
  }
  return out;
}

// A BROWSE DUE reply as a bar per step ("+5 min: 12 jobs"), bars scaled to the largest; no
// script, only widths.
std::string DueChart(ReplyView r, std::string_view id, std::string_view unit, int64_t step_s) {
  if (r.is_error()) {
    return "<p class=\"muted\">" + deferq::net::HtmlEscape(r.str()) + "</p>";
  }
  const auto f = Fields(r);
  const auto counts = f.find("counts");
  if (counts == f.end() || !counts->second.is_array()) return {};
  const ReplyView c = counts->second;
  int64_t most = 1, total = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    most = std::max(most, Int(c[i]));
    total += Int(c[i]);
  }
  std::string out = "<table class=\"chart\" id=\"" + std::string(id) + "\"><tr><th>in the next " +
                    std::to_string(c.size()) + " " + std::string(unit) +
                    "s</th><th>jobs</th><th></th></tr>";
  for (size_t i = 0; i < c.size(); ++i) {
    const int64_t n = Int(c[i]);
    if (n == 0) continue;  // a chart of the steps that have jobs
    const int64_t from = static_cast<int64_t>(i) * step_s / (step_s >= 3600 ? 3600 : 60);
    out += "<tr><td>+" + std::to_string(from) + (step_s >= 3600 ? " h" : " min") + "</td>" +
           Cell(n) + "<td class=\"text\"><span class=\"bar\" style=\"width:" +
           std::to_string(std::max<int64_t>(1, n * 300 / most)) + "px\"></span></td></tr>";
  }
  const auto later = f.find("later");
  const auto complete = f.find("complete");
  out += "</table><p class=\"muted\">" + std::to_string(total) + " due in the next " +
         std::to_string(c.size()) + " " + std::string(unit) + "s, " +
         std::to_string(later == f.end() ? 0 : Int(later->second)) + " later" +
         (complete != f.end() && Int(complete->second) == 0
              ? " (the buckets past the first 5,000 seconds that hold jobs are counted as later)"
              : "") +
         ".</p>";
  return out;
}

// A BROWSE DELAYED|LEASED reply as a table with a link to the next page.
std::string BrowseTable(ReplyView r, std::string_view id, std::string_view title,
                        std::string_view due_name, const std::string& ns, const std::string& q,
                        int64_t from, int64_t total) {
  using deferq::net::HtmlEscape;
  using deferq::net::UrlEncode;
  std::string out = "<h2>" + std::string(title) + "</h2>";
  if (r.is_error()) return out + "<p class=\"muted\">" + HtmlEscape(r.str()) + "</p>";
  if (!r.is_array() || r.size() == 0) {
    return out + "<p class=\"muted\">No job" + (from > 0 ? " from " + WallTime(from) : "") +
           ".</p>";
  }
  out += "<p class=\"muted\">" + std::to_string(r.size()) + " of " + std::to_string(total) +
         (from > 0 ? ", from " + WallTime(from) : "") + ", in " + std::string(due_name) +
         " order.</p><table id=\"" + std::string(id) + "\"><tr><th>id</th><th>" +
         std::string(due_name) + "</th><th>payload</th><th>tries left</th><th>attempt</th></tr>";
  int64_t last = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    const ReplyView j = r[i];
    if (!j.is_array() || j.size() < 6) continue;
    const std::string jid(j[0].str());
    last = Int(j[1]);
    std::string payload = deferq::net::ShowBytes(j[2].str(), 80);
    if (Int(j[3]) > static_cast<int64_t>(j[2].str().size())) {
      payload += " <span class=\"muted\">(" + std::to_string(Int(j[3])) + " bytes)</span>";
    }
    out += "<tr><td><a href=\"/console/job?ns=" + UrlEncode(ns) + "&amp;q=" + UrlEncode(q) +
           "&amp;id=" + UrlEncode(jid) + "\">" + HtmlEscape(jid) + "</a></td><td>" +
           WallTime(last) + "</td><td class=\"text\">" + payload + "</td>" + Cell(Int(j[4])) +
           Cell(Int(j[5])) + "</tr>";
  }
  out += "</table>";
  if (r.size() >= deferq::net::Console::kJobsShown) {
    out += "<p><a id=\"" + std::string(id) + "-next\" href=\"" + QueueLink(ns, q) + "&amp;" +
           std::string(id) + "_from=" + std::to_string(last + 1) + "\">next " + std::string(title) +
           " jobs</a></p>";
  }
  return out;
}

}  // namespace

std::string FormDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%' && i + 2 < text.size() && HexValue(text[i + 1]) >= 0 &&
               HexValue(text[i + 2]) >= 0) {
      out += static_cast<char>(HexValue(text[i + 1]) * 16 + HexValue(text[i + 2]));
      i += 2;
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormValue(std::string_view form, std::string_view name) {
  while (!form.empty()) {
    const size_t amp = form.find('&');
    const std::string_view pair = form.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string() : FormDecode(pair.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    form.remove_prefix(amp + 1);
  }
  return {};
}

std::string HtmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Console::Console(LoopHost& server, ConsoleRun run) : server_(server), run_(std::move(run)) {
  if (RAND_bytes(key_.data(), static_cast<int>(key_.size())) != 1) {
    // Without randomness no session can be trusted: every cookie fails to verify.
    DQ_LOG(kError, "console: no random key (RAND_bytes failed); nobody can log in");
    key_.fill(0);
  }
}

std::vector<std::string> FormValues(std::string_view form, std::string_view name) {
  std::vector<std::string> out;
  while (!form.empty()) {
    const size_t amp = form.find('&');
    const std::string_view pair = form.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name && eq != std::string_view::npos) {
      out.push_back(FormDecode(pair.substr(eq + 1)));
    }
    if (amp == std::string_view::npos) break;
    form.remove_prefix(amp + 1);
  }
  return out;
}

std::string UrlEncode(std::string_view text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
        c == '.' || c == '~' || c == '-') {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

namespace {

// Whether `bytes` is UTF-8 text without control characters other than tab, CR and newline.
bool IsText(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) return false;
      ++i;
      continue;
    }
    size_t n = 0;
    if ((c & 0xe0) == 0xc0 && c >= 0xc2) {
      n = 1;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2;
    } else if ((c & 0xf8) == 0xf0 && c <= 0xf4) {
      n = 3;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= bytes.size() || (static_cast<unsigned char>(bytes[i + k]) & 0xc0) != 0x80) {
        return false;
      }
    }
    i += n + 1;
  }
  return true;
}

}  // namespace

std::string ShowBytes(std::string_view bytes, size_t limit) {
  const size_t total = bytes.size();
  std::string_view shown = bytes.substr(0, limit);
  // Cut text at a character boundary.
  while (shown.size() < total && !shown.empty() &&
         (static_cast<unsigned char>(bytes[shown.size()]) & 0xc0) == 0x80) {
    shown.remove_suffix(1);
  }
  std::string out;
  if (IsText(shown)) {
    out = HtmlEscape(shown);
  } else {
    static const char kHex[] = "0123456789abcdef";
    out = "<span class=\"muted\">hex:</span> ";
    shown = bytes.substr(0, limit);
    for (size_t i = 0; i < shown.size(); ++i) {
      const auto c = static_cast<unsigned char>(shown[i]);
      if (i > 0 && i % 2 == 0) out += ' ';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (shown.size() < total) {
    out += " <span class=\"muted\">&hellip; (" + std::to_string(total) + " bytes, the first " +
           std::to_string(shown.size()) + " shown)</span>";
  }
  return out;
}

bool Console::Owns(std::string_view path) {
  return path == "/console" || path.starts_with("/console/");
}

std::string Console::Sign(std::string_view what) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(what.data()), what.size(), mac, &len);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[mac[i] >> 4];
    out += kHex[mac[i] & 15];
  }
  return out;
}

bool Console::LoginOf(const HttpRequest& request, int64_t now_wall_ms, Login* out) const {
  // Cookie: a=b; dq_console=<expires>.admin.<hmac>  or  <expires>.ns.<digest>.<ns>.<hmac>
  std::string_view cookies = request.cookie;
  while (!cookies.empty()) {
    const size_t semi = cookies.find(';');
    std::string_view item = cookies.substr(0, semi);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    const size_t eq = item.find('=');
    if (eq != std::string_view::npos && item.substr(0, eq) == kCookie) {
      const std::string_view value = item.substr(eq + 1);
      const size_t dot = value.rfind('.');
      if (dot == std::string_view::npos) return false;
      const std::string_view session = value.substr(0, dot);
      const std::string_view mac = value.substr(dot + 1);
      const std::string expected = Sign(session);
      if (mac.size() != expected.size() ||
          CRYPTO_memcmp(mac.data(), expected.data(), expected.size()) != 0) {
        return false;
      }
      const size_t first = session.find('.');
      if (first == std::string_view::npos) return false;
      int64_t expires = 0;
      const std::string_view when = session.substr(0, first);
      if (std::from_chars(when.data(), when.data() + when.size(), expires).ec != std::errc() ||
          expires <= now_wall_ms) {
        return false;
      }
      const std::string_view rest = session.substr(first + 1);
      Login login;
      login.signed_part = std::string(session);
      if (rest == "admin") {
        login.admin = true;
      } else if (rest.starts_with("ns.")) {
        const std::string_view tail = rest.substr(3);
        const size_t d = tail.find('.');
        if (d == std::string_view::npos) return false;
        login.digest = std::string(tail.substr(0, d));
        login.ns = std::string(tail.substr(d + 1));
        if (!ValidName(login.ns)) return false;
      } else {
        return false;
      }
      *out = std::move(login);
      return true;
    }
    if (semi == std::string_view::npos) break;
    cookies.remove_prefix(semi + 1);
  }
  return false;
}

std::string Console::CsrfToken(std::string_view session) const {
  return Sign(std::string("csrf:") + std::string(session));
}

HttpResponse Console::Redirect(std::string_view to) {
  HttpResponse r;
  r.status = 303;
  r.headers.emplace_back("Location", std::string(to));
  r.content_type = "text/plain; charset=utf-8";
  r.body = "see " + std::string(to) + "\n";
  return r;
}

HttpResponse Console::Text(int status, std::string_view text) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::string(text) + "\n";
  return r;
}

HttpResponse Console::Failed(std::string_view error) {
  if (error.starts_with("NOAUTH")) {
    // The namespace's token was revoked (or the namespace deleted): the login is over.
    HttpResponse r = Redirect("/console/login");
    r.headers.emplace_back("Set-Cookie", std::string(kCookie) +
                                             "=; Path=/console; HttpOnly; SameSite=Strict; "
                                             "Max-Age=0");
    return r;
  }
  return Text(503, "deferq answered: " + std::string(error));
}

bool Console::MaySee(const Login& login, const std::string& ns, HttpResponse* r) {
  if (!ValidName(ns)) {
    *r = Text(400, "invalid namespace name");
    return false;
  }
  if (!login.admin && ns != login.ns) {
    *r = Text(403, "this login sees namespace '" + login.ns + "' only");
    return false;
  }
  return true;
}

void Console::Run(const Login& login, const std::string& ns,
                  const std::vector<std::vector<std::string>>& commands, Then then) {
  queue::Session session;
  session.authenticated = true;
  session.ns = ns;
  if (login.admin) {
    session.admin = true;
  } else {
    // Checked again against the namespace's tokens before the first command: a revoked token
    // ends the console session as it ends a connection's (NamespaceGate).
    session.token_digest = login.digest;
    session.auth_valid_until_ms = 0;
  }
  const size_t expected = commands.size();
  run_(session, EncodeCommands(commands),
       [expected, then = std::move(then)](bool ok, std::string replies, const queue::Session&) {
         persist::ReplyList out;
         if (!ok || !out.Parse(replies, expected)) return then(nullptr);
         then(&out);
       });
}

HttpResponse Console::LoginPage(std::string_view message, int status) const {
  HttpResponse r;
  r.status = status;
  std::string body = "<h1>deferq console</h1>";
  if (!message.empty()) body += "<p class=\"bad\" id=\"message\">" + HtmlEscape(message) + "</p>";
  body +=
      "<form method=\"post\" action=\"/console/login\">"
      "<p><label>Namespace <input name=\"namespace\" autocomplete=\"username\" "
      "placeholder=\"empty: admin\"></label></p>"
      "<p><label>Admin password or the namespace's token <input type=\"password\" "
      "name=\"password\" autofocus autocomplete=\"current-password\"></label></p>"
      "<p><button type=\"submit\">Log in</button></p></form>";
  r.body = Page("Log in", body);
  return r;
}

HttpResponse Console::Opened(const std::string& signed_part) const {
  HttpResponse r = Redirect("/console");
  r.headers.emplace_back("Set-Cookie", std::string(kCookie) + "=" + signed_part + "." +
                                           Sign(signed_part) +
                                           "; Path=/console; HttpOnly; SameSite=Strict; Max-Age=" +
                                           std::to_string(kSessionMs / 1000));
  return r;
}

HttpResponse Console::Refused(int64_t now_wall_ms, std::string_view who) {
  login_penalty_ms_ = std::clamp<int64_t>(login_penalty_ms_ * 2, 250, kMaxLoginPenaltyMs);
  next_login_ms_ = now_wall_ms + login_penalty_ms_;
  DQ_LOG(kWarning, "console: a failed login (%.*s)", static_cast<int>(who.size()), who.data());
  return LoginPage("Wrong password or token.", 403);
}

void Console::LogIn(const HttpRequest& request, int64_t now_wall_ms, ConsoleRespond respond) {
  if (now_wall_ms < next_login_ms_) {
    return respond(LoginPage("Too many failed logins: wait a few seconds.", 429));
  }
  const std::string ns = FormValue(request.body, "namespace");
  const std::string secret = FormValue(request.body, "password");
  const std::string expires = std::to_string(now_wall_ms + kSessionMs);
  if (ns.empty() || ns == "admin") {
    if (secret.empty() || !server_.instance().CheckAdminPassword(secret)) {
      return respond(Refused(now_wall_ms, "the admin password did not match"));
    }
    login_penalty_ms_ = 0;
    return respond(Opened(expires + ".admin"));
  }
  if (!server_.config().auth_required) {
    // Without auth.required a client needs no token for any namespace: a namespace login would
    // protect nothing, so only the admin password opens the console.
    return respond(LoginPage(
        "Namespace logins need auth.required = true; log in with the admin password.", 403));
  }
  if (!ValidName(ns) || secret.empty()) {
    return respond(Refused(now_wall_ms, "no such namespace or token"));
  }
  // The token is checked as AUTH checks it (the namespace's token digests in Redis).
  queue::Session session;
  run_(session, EncodeCommands({{"AUTH", ns, secret}}),
       [this, ns, expires, now_wall_ms, respond = std::move(respond)](bool ok, std::string replies,
                                                                      const queue::Session& after) {
         if (!ok || !replies.starts_with("+OK") || !after.authenticated || after.admin ||
             after.ns != ns || after.token_digest.empty()) {
           return respond(Refused(now_wall_ms, "namespace '" + ns + "': the token did not match"));
         }
         login_penalty_ms_ = 0;
         respond(Opened(expires + ".ns." + after.token_digest + "." + ns));
       });
}

std::string Console::Header(const Login& login, std::string_view title) const {
  const std::string who = login.admin ? "admin" : "namespace " + HtmlEscape(login.ns);
  return "<header><h1>" + HtmlEscape(title) + "</h1><span class=\"muted\">instance " +
         HtmlEscape(static_cast<const queue::ServerContext&>(server_).instance_id()) +
         " &middot; " + who + (server_.config().console_read_only ? " &middot; read-only" : "") +
         " <form class=\"inline\" method=\"post\" action=\"/console/logout\">" +
         Hidden("csrf", CsrfToken(login.signed_part)) +
         "<button type=\"submit\">Log out</button></form></span></header>";
}

HttpResponse Console::Overview(const HttpRequest& request, const Login& login,
                               int64_t now_wall_ms) {
  using F = queue::QueueFigures;
  const std::string filter = FormValue(request.query, "q");
  size_t page = 0;
  {
    const std::string p = FormValue(request.query, "page");
    std::from_chars(p.data(), p.data() + p.size(), page);
  }
  std::string body = Header(login, "deferq console");

  if (login.admin) {
    body +=
        "<h2>Pools</h2><table id=\"pools\"><tr><th>pool</th><th>address</th><th>connections "
        "up</th><th>writes</th><th>requests</th><th>failures</th></tr>";
    for (const queue::PoolSnapshot& p : server_.Pools()) {
      body += "<tr><td>" + HtmlEscape(p.name) + "</td><td>" + HtmlEscape(p.addr) + "</td><td" +
              std::string(p.connections_up == 0 ? " class=\"bad\"" : "") + ">" +
              std::to_string(p.connections_up) + " / " + std::to_string(p.connections) +
              "</td><td" + (std::string_view(p.writes) == "ok" ? "" : " class=\"bad\"") + ">" +
              HtmlEscape(p.writes) + "</td>" + Cell(static_cast<int64_t>(p.requests)) +
              Cell(static_cast<int64_t>(p.failures)) + "</tr>";
    }
    body += "</table>";
  }

  const auto snap = server_.instance().queue_stats().Load();
  // In name order, as the figures are: a shown queue's histogram is found by binary search.
  const auto lateness = server_.instance().lateness().Snapshot();
  body += "<h2>Queues</h2>";
  body +=
      "<form method=\"get\" action=\"/console\"><label>Queue name contains <input name=\"q\" "
      "value=\"" +
      HtmlEscape(filter) + "\"></label> <button type=\"submit\">Find</button></form>";
  if (snap == nullptr) {
    body += "<p class=\"muted\">No figures read from Redis yet.</p>";
  } else {
    char age[64];
    snprintf(age, sizeof(age), "%.1f",
             static_cast<double>(now_wall_ms - snap->taken_wall_ms) / 1e3);
    // Rates: between this snapshot and the one the console saw before it (the poller reads every
    // 2 s; pages opened seldom average over longer).
    if (snap != seen_) {
      before_ = std::exchange(seen_, snap);
    }
    const bool rates = before_ != nullptr && before_->taken_wall_ms < snap->taken_wall_ms;
    const double span_s =
        rates ? static_cast<double>(snap->taken_wall_ms - before_->taken_wall_ms) / 1e3 : 0;
    char span[64];
    snprintf(span, sizeof(span), "%.1f", span_s);
    body += "<p class=\"muted\">Figures read from Redis " + std::string(age) +
            " s ago (every 2 s; at most server.metrics_max_queues queues); rates " +
            (rates ? "over the " + std::string(span) + " s before that read"
                   : "once the console has seen two reads (reload)") +
            ".</p>";
    // Pointers only: with 100,000 queues a page costs a pass over them, nothing per queue more.
    std::vector<const std::pair<const std::string, F>*> shown;
    const std::string prefix = login.admin ? std::string() : login.ns + "/";
    for (const auto& entry : snap->queues) {
      if (!entry.first.starts_with(prefix)) continue;
      if (filter.empty() || entry.first.find(filter) != std::string::npos) shown.push_back(&entry);
    }
    const size_t pages = std::max<size_t>(1, (shown.size() + kPageSize - 1) / kPageSize);
    page = std::min(page, pages - 1);
    body +=
        "<table id=\"queues\"><tr><th>namespace</th><th>queue</th><th>ready</th>"
        "<th>delayed</th><th>leased</th><th>dead</th><th>paused</th><th>published</th>"
        "<th>consumed</th><th>acked</th><th>publish/s</th><th>consume/s</th>"
        "<th>lateness p99 (ms)</th></tr>";
    for (size_t i = page * kPageSize; i < std::min(shown.size(), (page + 1) * kPageSize); ++i) {
      const auto& [tag, f] = *shown[i];
      const queue::QueueName q = queue::QueueName::Parse(tag).value_or(queue::QueueName{"", tag});
      const auto late =
          std::lower_bound(lateness.begin(), lateness.end(), tag,
                           [](const auto& entry, const std::string& t) { return entry.first < t; });
      const bool has_late = late != lateness.end() && late->first == tag && late->second;
      // Per second since the read before (a queue new since then counts from zero).
      std::string rate_cells = "<td class=\"muted\">-</td><td class=\"muted\">-</td>";
      if (rates) {
        const auto prev = before_->queues.find(tag);
        rate_cells.clear();
        for (const F::Field field : {F::kPublished, F::kConsumed}) {
          const int64_t was = prev == before_->queues.end() ? 0 : prev->second.v[field];
          char rate[32];
          snprintf(rate, sizeof(rate), "%.1f",
                   static_cast<double>(std::max<int64_t>(0, f.v[field] - was)) / span_s);
          rate_cells += "<td>" + std::string(rate) + "</td>";
        }
      }
      body += "<tr><td>" + HtmlEscape(q.ns) + "</td><td><a href=\"" + QueueLink(q.ns, q.queue) +
              "\">" + HtmlEscape(q.queue) + "</a></td>" + Cell(f.v[F::kReady]) +
              Cell(f.v[F::kDelayed]) + Cell(f.v[F::kLeased]) +
              (f.v[F::kDead] > 0 ? "<td class=\"bad\">" + std::to_string(f.v[F::kDead]) + "</td>"
                                 : Cell(0)) +
              "<td>" + (f.v[F::kPaused] != 0 ? "paused" : "") + "</td>" + Cell(f.v[F::kPublished]) +
              Cell(f.v[F::kConsumed]) + Cell(f.v[F::kAcked]) + rate_cells +
              (has_late ? Cell(late->second->Quantile(0.99))
                        : std::string("<td class=\"muted\">-</td>")) +
              "</tr>";
    }
    body += "</table><p>" + std::to_string(shown.size()) + " queue" +
            (shown.size() == 1 ? "" : "s") + "; page " + std::to_string(page + 1) + " of " +
            std::to_string(pages);
    const std::string q = filter.empty() ? "" : "&amp;q=" + UrlEncode(filter);
    if (page > 0) {
      body +=
          " &middot; <a href=\"/console?page=" + std::to_string(page - 1) + q + "\">previous</a>";
    }
    if (page + 1 < pages) {
      body += " &middot; <a href=\"/console?page=" + std::to_string(page + 1) + q + "\">next</a>";
    }
    body += "</p>";
  }
  // A queue by name (also one the figures do not list) and a job by id.
  const std::string ns_field =
      login.admin ? "<label>Namespace <input name=\"ns\" value=\"default\"></label> "
                  : Hidden("ns", login.ns);
  body += "<h2>Open</h2><form method=\"get\" action=\"/console/queue\">" + ns_field +
          "<label>Queue <input name=\"q\"></label> <button type=\"submit\">Open queue</button>"
          "</form><form method=\"get\" action=\"/console/job\">" +
          ns_field +
          "<label>Queue <input name=\"q\"></label> <label>Job id <input name=\"id\"></label> "
          "<button type=\"submit\">Find job</button></form>";
  HttpResponse r;
  r.body = Page("Overview", body);
  return r;
}

void Console::QueuePage(const HttpRequest& request, const Login& login, int64_t now_wall_ms,
                        ConsoleRespond respond) {
  (void)now_wall_ms;
  const std::string ns = FormValue(request.query, "ns");
  const std::string q = FormValue(request.query, "q");
  const std::string reason = FormValue(request.query, "reason");
  const std::string message = FormValue(request.query, "msg");
  HttpResponse r;
  if (!MaySee(login, ns, &r)) return respond(std::move(r));
  if (!ValidQueueName(q)) return respond(Text(400, "invalid queue name"));
  // Pages of the ready jobs and the dead letters: PEEK and DEADLETTER PEEK read from the head,
  // so page p reads (p + 1) pages' jobs and shows the last; at most kDeadRead jobs deep.
  size_t ready_page = 0, dead_page = 0;
  {
    const std::string rp = FormValue(request.query, "ready_page");
    const std::string dp = FormValue(request.query, "dead_page");
    std::from_chars(rp.data(), rp.data() + rp.size(), ready_page);
    std::from_chars(dp.data(), dp.data() + dp.size(), dead_page);
    ready_page = std::min(ready_page, kLastPage);
    dead_page = reason.empty() ? std::min(dead_page, kLastPage) : 0;
  }
  const size_t dead_read = reason.empty() ? (dead_page + 1) * kJobsShown : kDeadRead;
  // Pages of the delayed and leased jobs: from a due time (the last one shown, plus 1 ms).
  int64_t delayed_from = 0, leased_from = 0;
  {
    const std::string d = FormValue(request.query, "delayed_from");
    const std::string l = FormValue(request.query, "leased_from");
    std::from_chars(d.data(), d.data() + d.size(), delayed_from);
    std::from_chars(l.data(), l.data() + l.size(), leased_from);
    delayed_from = std::max<int64_t>(0, delayed_from);
    leased_from = std::max<int64_t>(0, leased_from);
  }
  const std::string shown = std::to_string(kJobsShown);
  Run(login, ns,
      {{"QSTAT", q},
       {"PEEK", q, "COUNT", std::to_string((ready_page + 1) * kJobsShown)},
       {"DEADLETTER", "PEEK", q, "COUNT", std::to_string(dead_read), "WITHERRORS"},
       {"BROWSE", q, "DELAYED", "FROM", std::to_string(delayed_from), "COUNT", shown},
       {"BROWSE", q, "LEASED", "FROM", std::to_string(leased_from), "COUNT", shown},
       {"BROWSE", q, "DUE", "STEP", "60", "STEPS", "60"},
       {"BROWSE", q, "DUE", "STEP", "3600", "STEPS", "24"}},
      [this, login, ns, q, reason, message, delayed_from, leased_from, ready_page, dead_page,
       respond = std::move(respond)](Replies* replies) {
        if (replies == nullptr) return respond(Text(503, "the console's commands did not finish"));
        const Replies& rs = *replies;
        for (size_t i = 0; i < 3; ++i) {
          if (rs[i].is_error()) return respond(Failed(rs[i].str()));
        }
        const auto stat = Fields(rs[0]);
        auto count = [&stat](const char* name) {
          const auto it = stat.find(name);
          return it == stat.end() ? int64_t{0} : Int(it->second);
        };
        const bool read_only = server_.config().console_read_only;
        const std::string csrf = Hidden("csrf", CsrfToken(login.signed_part));
        const std::string target = Hidden("ns", ns) + Hidden("q", q);
        std::string body = Header(login, "Queue " + q);
        body += "<nav><a href=\"/console\">Overview</a> &rsaquo; " + HtmlEscape(ns) + " &rsaquo; " +
                HtmlEscape(q) + "</nav>";
        if (!message.empty()) {
          body += "<p class=\"note\" id=\"message\">" + HtmlEscape(message) + "</p>";
        }
        body +=
            "<table id=\"counts\"><tr><th>ready</th><th>delayed</th><th>leased</th>"
            "<th>dead</th><th>paused</th><th>published</th><th>consumed</th><th>acked</th>"
            "<th>expired</th><th>dead in all</th><th>schedules</th></tr><tr>" +
            Cell(count("ready")) + Cell(count("delayed")) + Cell(count("leased")) +
            Cell(count("dead")) + "<td id=\"paused\">" + (count("paused") ? "yes" : "no") +
            "</td>" + Cell(count("published_total")) + Cell(count("consumed_total")) +
            Cell(count("acked_total")) + Cell(count("expired_total")) + Cell(count("dead_total")) +
            Cell(count("schedules")) + "</tr></table>";
        if (!read_only) {
          const bool paused = count("paused") != 0;
          body += "<form class=\"inline\" method=\"post\" action=\"/console/act\">" + csrf +
                  target + "<button type=\"submit\" name=\"act\" value=\"" +
                  (paused ? "resume\">Resume" : "pause\">Pause") +
                  "</button></form> &middot; <form class=\"inline\" method=\"post\" "
                  "action=\"/console/act\">" +
                  csrf + target +
                  "<label>Type the queue's name to purge all its jobs <input name=\"confirm\" "
                  "autocomplete=\"off\"></label> <button type=\"submit\" name=\"act\" "
                  "value=\"purge\">Purge</button></form>";
        }
        body += "<form method=\"get\" action=\"/console/job\">" + target +
                "<label>Job id <input name=\"id\"></label> <button type=\"submit\">Find "
                "job</button></form>";

        // The previous/next links of a list paged from its head ("ready_page", "dead_page"), the
        // filter kept; `more`: the page read was full.
        auto pager = [&](const char* param, size_t page, bool more, const char* what) {
          auto link = [&](size_t to, const char* text) {
            return "<a id=\"" + std::string(param) + "-" + text + "\" href=\"" + QueueLink(ns, q) +
                   (reason.empty() ? "" : "&amp;reason=" + UrlEncode(reason)) + "&amp;" + param +
                   "=" + std::to_string(to) + "\">" + text + "</a>";
          };
          const bool next = more && page < kLastPage;
          if (page == 0 && !next) return std::string();
          std::string out = "<p>";
          if (page > 0) out += link(page - 1, "previous") + " ";
          if (next) out += link(page + 1, "next");
          return out + " <span class=\"muted\">(the first " + std::to_string(kDeadRead) + " " +
                 what + " are paged)</span></p>";
        };
        std::vector<JobRow> ready = JobRows(rs[1]);
        const bool ready_more = ready.size() == (ready_page + 1) * kJobsShown;
        ready.erase(ready.begin(), ready.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                       ready.size(), ready_page * kJobsShown)));
        body += "<h2>Ready</h2>";
        if (ready.empty()) {
          body += "<p class=\"muted\">No job ready" +
                  std::string(ready_page > 0 ? " on this page" : "") + ".</p>";
        } else {
          body += "<p class=\"muted\">" + std::to_string(ready_page * kJobsShown + 1) + " to " +
                  std::to_string(ready_page * kJobsShown + ready.size()) + " of " +
                  std::to_string(count("ready")) +
                  ", in the order they will be handed out.</p>"
                  "<table id=\"ready\"><tr><th>id</th><th>payload</th><th>tries left</th>"
                  "<th>attempt</th><th>age (s)</th></tr>";
          for (const JobRow& j : ready) {
            body += "<tr><td><a href=\"/console/job?ns=" + UrlEncode(ns) +
                    "&amp;q=" + UrlEncode(q) + "&amp;id=" + UrlEncode(j.id) + "\">" +
                    HtmlEscape(j.id) + "</a></td><td class=\"text\">" + ShowBytes(j.payload, 80) +
                    "</td>" + Cell(j.tries_left) + Cell(j.attempt) + Cell(j.elapsed_ms / 1000) +
                    "</tr>";
          }
          body += "</table>";
        }
        body += pager("ready_page", ready_page, ready_more, "ready jobs");

        // When the delayed jobs fall due: the coming hour by minute, the coming day by hour.
        body += "<h2>Falling due</h2>";
        body += DueChart(rs[5], "due-minutes", "minute", 60) +
                DueChart(rs[6], "due-hours", "hour", 3600);
        body +=
            BrowseTable(rs[3], "delayed", "Delayed", "due", ns, q, delayed_from, count("delayed"));
        body += BrowseTable(rs[4], "leased", "Leased", "lease ends", ns, q, leased_from,
                            count("leased"));

        std::vector<JobRow> dead = JobRows(rs[2]);
        const size_t read = dead.size();
        const bool dead_more = reason.empty() && read == (dead_page + 1) * kJobsShown;
        if (reason.empty()) {
          dead.erase(dead.begin(), dead.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                      dead.size(), dead_page * kJobsShown)));
        }
        if (!reason.empty()) {
          std::erase_if(dead, [&reason](const JobRow& j) {
            return j.error.find(reason) == std::string::npos;
          });
        }
        body +=
            "<h2 id=\"dead-letters\">Dead letters</h2>"
            "<form method=\"get\" action=\"/console/queue\">" +
            target + "<label>Reason contains <input name=\"reason\" value=\"" + HtmlEscape(reason) +
            "\"></label> <button type=\"submit\">Filter</button></form>";
        if (dead.empty()) {
          body += "<p class=\"muted\">" +
                  std::string(reason.empty() ? "No dead job." : "No dead job matches.") + "</p>";
        } else {
          if (reason.empty()) {
            body += "<p class=\"muted\">" + std::to_string(dead_page * kJobsShown + 1) + " to " +
                    std::to_string(dead_page * kJobsShown + dead.size()) + " of " +
                    std::to_string(count("dead")) + ", oldest death first.</p>";
          } else {
            body += "<p class=\"muted\">" + std::to_string(dead.size()) +
                    " matching among the oldest " + std::to_string(read) + " of " +
                    std::to_string(count("dead")) + ".</p>";
          }
          if (!read_only) {
            body += "<form method=\"post\" action=\"/console/act\">" + csrf + target +
                    Hidden("reason", reason);
          }
          body += std::string(
                      "<table id=\"dead\"><tr><th></th><th>id</th><th>last error</th>"
                      "<th>on attempt</th><th>failed at</th><th>payload</th>") +
                  (read_only ? "" : "<th></th>") + "</tr>";
          for (const JobRow& j : dead) {
            body += "<tr><td>" +
                    (read_only ? std::string()
                               : "<input type=\"checkbox\" name=\"id\" value=\"" +
                                     HtmlEscape(j.id) + "\">") +
                    "</td><td><a href=\"/console/job?ns=" + UrlEncode(ns) +
                    "&amp;q=" + UrlEncode(q) + "&amp;id=" + UrlEncode(j.id) + "\">" +
                    HtmlEscape(j.id) + "</a></td><td class=\"text reason\">" +
                    (j.has_error ? HtmlEscape(j.error)
                                 : std::string("<span class=\"muted\">none recorded</span>")) +
                    "</td>" + Cell(j.error_attempt) + "<td>" + WallTime(j.error_ms) +
                    "</td><td class=\"text\">" + ShowBytes(j.payload, 80) + "</td>";
            if (!read_only) {
              body += "<td><button type=\"submit\" name=\"one\" value=\"respawn " +
                      HtmlEscape(j.id) +
                      "\">Respawn</button> <button type=\"submit\" "
                      "name=\"one\" value=\"delete " +
                      HtmlEscape(j.id) + "\">Delete</button></td>";
            }
            body += "</tr>";
          }
          body += "</table>";
          if (!read_only) {
            body +=
                "<p><button type=\"submit\" name=\"act\" value=\"respawn\">Respawn "
                "selected</button> <button type=\"submit\" name=\"act\" "
                "value=\"delete\">Delete selected</button> &middot; ";
            if (reason.empty()) {
              body += "<button type=\"submit\" name=\"act\" value=\"respawn_all\">Respawn all " +
                      std::to_string(count("dead")) +
                      "</button> <button type=\"submit\" name=\"act\" value=\"delete_all\">"
                      "Delete all " +
                      std::to_string(count("dead")) + "</button>";
            } else {
              body +=
                  "<button type=\"submit\" name=\"act\" value=\"respawn_matching\">Respawn "
                  "all " +
                  std::to_string(dead.size()) +
                  " matching</button> <button type=\"submit\" name=\"act\" "
                  "value=\"delete_matching\">Delete all " +
                  std::to_string(dead.size()) + " matching</button>";
            }
            body += "</p></form>";
          }
        }
        body += pager("dead_page", dead_page, dead_more, "dead letters");
        HttpResponse page;
        page.body = Page("Queue " + q, body);
        respond(std::move(page));
      });
}

void Console::JobPage(const HttpRequest& request, const Login& login, ConsoleRespond respond) {
  const std::string ns = FormValue(request.query, "ns");
  const std::string q = FormValue(request.query, "q");
  const std::string id = FormValue(request.query, "id");
  HttpResponse r;
  if (!MaySee(login, ns, &r)) return respond(std::move(r));
  if (!ValidQueueName(q)) return respond(Text(400, "invalid queue name"));
  if (!ValidName(id)) return respond(Text(400, "invalid job id"));
  Run(login, ns, {{"JOB", q, id}},
      [this, login, ns, q, id, respond = std::move(respond)](Replies* replies) {
        if (replies == nullptr) return respond(Text(503, "the console's commands did not finish"));
        const ReplyView job = (*replies)[0];
        if (job.is_error()) return respond(Failed(job.str()));
        std::string body = Header(login, "Job " + id);
        body += "<nav><a href=\"/console\">Overview</a> &rsaquo; " + HtmlEscape(ns) +
                " &rsaquo; <a href=\"" + QueueLink(ns, q) + "\">" + HtmlEscape(q) +
                "</a> &rsaquo; " + HtmlEscape(id) + "</nav>";
        HttpResponse page;
        if (!job.is_array()) {
          page.status = 404;
          body += "<p id=\"message\">No job " + HtmlEscape(id) + " in this queue.</p>";
          page.body = Page("Job " + id, body);
          return respond(std::move(page));
        }
        body += "<table id=\"job\">";
        for (size_t i = 0; i + 1 < job.size(); i += 2) {
          const std::string name(job[i].str());
          const ReplyView v = job[i + 1];
          std::string shown;
          if (v.is_nil()) {
            shown = "<span class=\"muted\">-</span>";
          } else if (v.is_integer()) {
            shown = std::to_string(v.integer());
            if (name.ends_with("_ms") && v.integer() > 0) {
              shown += " (" + WallTime(v.integer()) + ")";
            }
          } else if (name == "payload" || name == "result") {
            shown = "<pre>" + ShowBytes(v.str(), kPayloadShown) + "</pre>";
          } else {
            shown = HtmlEscape(v.str());
          }
          body += "<tr><th>" + HtmlEscape(name) + "</th><td class=\"text\" id=\"job-" +
                  HtmlEscape(name) + "\">" + shown + "</td></tr>";
        }
        body += "</table>";
        page.body = Page("Job " + id, body);
        respond(std::move(page));
      });
}

void Console::Act(const HttpRequest& request, const Login& login, ConsoleRespond respond) {
  if (server_.config().console_read_only) {
    return respond(Text(403, "the console is read-only (server.console_read_only)"));
  }
  const std::string ns = FormValue(request.body, "ns");
  const std::string q = FormValue(request.body, "q");
  const std::string reason = FormValue(request.body, "reason");
  std::string act = FormValue(request.body, "act");
  std::vector<std::string> ids = FormValues(request.body, "id");
  HttpResponse r;
  if (!MaySee(login, ns, &r)) return respond(std::move(r));
  if (!ValidQueueName(q)) return respond(Text(400, "invalid queue name"));
  // A row's own button: "respawn <id>" or "delete <id>".
  const std::string one = FormValue(request.body, "one");
  if (!one.empty()) {
    const size_t space = one.find(' ');
    act = one.substr(0, space);
    ids = {space == std::string::npos ? std::string() : one.substr(space + 1)};
  }
  std::string back = "/console/queue?ns=" + UrlEncode(ns) + "&q=" + UrlEncode(q);
  if (!reason.empty()) back += "&reason=" + UrlEncode(reason);
  auto done = [back, respond](const std::string& message) {
    // A revoked token ends the session (as it ends a connection's).
    if (message.starts_with("deferq answered: NOAUTH")) return respond(Failed("NOAUTH"));
    respond(Redirect(back + "&msg=" + UrlEncode(message)));
  };
  auto first_error = [](Replies* rs) -> std::string {
    if (rs == nullptr) return "the console's commands did not finish";
    for (size_t i = 0; i < rs->size(); ++i) {
      if ((*rs)[i].is_error()) return "deferq answered: " + std::string((*rs)[i].str());
    }
    return {};
  };
  auto run_one = [this, login, ns, first_error, done](std::vector<std::string> command,
                                                      std::string message) {
    Run(login, ns, {std::move(command)}, [first_error, done, message](Replies* rs) {
      const std::string error = first_error(rs);
      done(error.empty() ? message : error);
    });
  };
  if (act == "pause") return run_one({"QPAUSE", q}, "Paused.");
  if (act == "resume") return run_one({"QRESUME", q}, "Resumed.");
  if (act == "purge") {
    if (FormValue(request.body, "confirm") != q) {
      return done("Not purged: type the queue's name to confirm.");
    }
    return Run(login, ns, {{"PURGE", q}}, [first_error, done](Replies* rs) {
      const std::string error = first_error(rs);
      done(error.empty() ? "Purged " + std::to_string(Int((*rs)[0])) + " jobs." : error);
    });
  }
  auto by_ids = [this, login, ns, q, first_error, done](const std::string& what,
                                                        const std::vector<std::string>& ids) {
    std::vector<std::vector<std::string>> commands;
    for (const std::string& id : ids) {
      if (!ValidName(id)) continue;
      if (what == "respawn") {
        commands.push_back({"DEADLETTER", "RESPAWN", q, "ID", id});
      } else {
        commands.push_back({"DEADLETTER", "DELETE", q, "ID", id});
      }
      if (commands.size() == kDeadRead) break;
    }
    if (commands.empty()) return done("Nothing selected.");
    Run(login, ns, commands, [what, first_error, done](Replies* rs) {
      const std::string error = first_error(rs);
      if (!error.empty()) return done(error);
      int64_t n = 0;
      for (size_t i = 0; i < rs->size(); ++i) n += Int((*rs)[i]);
      done((what == "respawn" ? "Respawned " : "Deleted ") + std::to_string(n) + " dead job" +
           (n == 1 ? "." : "s."));
    });
  };
  if (act == "respawn" || act == "delete") return by_ids(act, ids);
  if (act == "respawn_matching" || act == "delete_matching") {
    // Among the oldest kDeadRead dead letters (what the page listed), those whose last error
    // contains the text, read again now.
    if (reason.empty()) return done("No reason to match.");
    const std::string what = act.substr(0, act.find('_'));
    return Run(login, ns,
               {{"DEADLETTER", "PEEK", q, "COUNT", std::to_string(kDeadRead), "WITHERRORS"}},
               [reason, what, by_ids, first_error, done](Replies* rs) {
                 const std::string error = first_error(rs);
                 if (!error.empty()) return done(error);
                 std::vector<std::string> matching;
                 for (const JobRow& j : JobRows((*rs)[0])) {
                   if (j.error.find(reason) != std::string::npos) matching.push_back(j.id);
                 }
                 by_ids(what, matching);
               });
  }
  if (act == "respawn_all" || act == "delete_all") {
    // Rounds of 1,000 (the most one DEADLETTER call moves), at most 100 per press.
    const std::string what = act.substr(0, act.find('_'));
    // Each pending round holds the chain; nothing holds it once the last one answered.
    struct Chain {
      std::function<void(std::shared_ptr<Chain>, int64_t, int)> step;
    };
    auto chain = std::make_shared<Chain>();
    chain->step = [this, login, ns, q, what, first_error, done](std::shared_ptr<Chain> self,
                                                                int64_t total, int rounds) {
      Run(login, ns,
          {{"DEADLETTER", what == "respawn" ? "RESPAWN" : "DELETE", q, "COUNT",
            std::to_string(kDeadRead)}},
          [self, total, rounds, what, first_error, done](Replies* rs) {
            const std::string error = first_error(rs);
            if (!error.empty()) return done(error);
            const int64_t n = Int((*rs)[0]);
            if (n == static_cast<int64_t>(kDeadRead) && rounds < 100) {
              return self->step(self, total + n, rounds + 1);
            }
            done((what == "respawn" ? "Respawned " : "Deleted ") + std::to_string(total + n) +
                 " dead jobs.");
          });
    };
    return chain->step(chain, 0, 1);
  }
  done("Unknown action.");
}

void Console::Handle(const HttpRequest& request, int64_t now_wall_ms, ConsoleRespond respond) {
  // Never cached, never framed by another site.
  ConsoleRespond send = [respond = std::move(respond)](HttpResponse r) {
    r.headers.emplace_back("Cache-Control", "no-store");
    r.headers.emplace_back("X-Frame-Options", "DENY");
    r.headers.emplace_back("Content-Security-Policy",
                           "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                           "frame-ancestors 'none'");
    respond(std::move(r));
  };
  if (request.path == "/console/login") {
    if (request.method == "POST") return LogIn(request, now_wall_ms, std::move(send));
    if (request.method == "GET") return send(LoginPage("", 200));
    return send(LoginPage("Only GET and POST.", 405));
  }
  Login login;
  if (!LoginOf(request, now_wall_ms, &login)) return send(Redirect("/console/login"));
  if (request.method == "POST") {
    // Every action proves it comes from a page this session was served.
    const std::string csrf = FormValue(request.body, "csrf");
    const std::string expected = CsrfToken(login.signed_part);
    if (csrf.size() != expected.size() ||
        CRYPTO_memcmp(csrf.data(), expected.data(), expected.size()) != 0) {
      return send(Text(403, "this form did not come from this session's console page"));
    }
    if (request.path == "/console/logout") {
      HttpResponse r = Redirect("/console/login");
      r.headers.emplace_back("Set-Cookie", std::string(kCookie) +
                                               "=; Path=/console; HttpOnly; SameSite=Strict; "
                                               "Max-Age=0");
      return send(std::move(r));
    }
    if (request.path == "/console/act") return Act(request, login, std::move(send));
    return send(Text(404, "not found"));
  }
  if (request.method != "GET") return send(Text(405, "only GET and POST"));
  if (request.path == "/console" || request.path == "/console/") {
    return send(Overview(request, login, now_wall_ms));
  }
  if (request.path == "/console/queue")
    return QueuePage(request, login, now_wall_ms, std::move(send));
  if (request.path == "/console/job") return JobPage(request, login, std::move(send));
  send(Text(404, "not found"));
}

}  // namespace deferq::net
