#include "net/console.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>

#include "base/log.h"
#include "net/loop_host.h"
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
      "form.inline{display:inline}"
      "</style></head><body>";
  out += body;
  out += "</body></html>";
  return out;
}

std::string Cell(int64_t v) { return "<td>" + std::to_string(v) + "</td>"; }

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

Console::Console(LoopHost& server) : server_(server) {
  if (RAND_bytes(key_.data(), static_cast<int>(key_.size())) != 1) {
    // Without randomness no session can be trusted: every cookie fails to verify.
    DQ_LOG(kError, "console: no random key (RAND_bytes failed); nobody can log in");
    key_.fill(0);
  }
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

std::string Console::SessionOf(const HttpRequest& request, int64_t now_wall_ms) const {
  // Cookie: a=b; dq_console=admin.1700000000000.<hmac>
  std::string_view cookies = request.cookie;
  while (!cookies.empty()) {
    const size_t semi = cookies.find(';');
    std::string_view item = cookies.substr(0, semi);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    const size_t eq = item.find('=');
    if (eq != std::string_view::npos && item.substr(0, eq) == kCookie) {
      const std::string_view value = item.substr(eq + 1);
      const size_t dot = value.rfind('.');
      if (dot == std::string_view::npos) return {};
      const std::string_view session = value.substr(0, dot);
      const std::string_view mac = value.substr(dot + 1);
      const std::string expected = Sign(session);
      if (mac.size() != expected.size() ||
          CRYPTO_memcmp(mac.data(), expected.data(), expected.size()) != 0) {
        return {};
      }
      const size_t first = session.find('.');
      if (first == std::string_view::npos) return {};
      int64_t expires = 0;
      const std::string_view when = session.substr(first + 1);
      if (std::from_chars(when.data(), when.data() + when.size(), expires).ec != std::errc() ||
          expires <= now_wall_ms) {
        return {};
      }
      return std::string(session);
    }
    if (semi == std::string_view::npos) break;
    cookies.remove_prefix(semi + 1);
  }
  return {};
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

HttpResponse Console::LoginPage(std::string_view message, int status) const {
  HttpResponse r;
  r.status = status;
  std::string body = "<h1>deferq console</h1>";
  if (!message.empty()) body += "<p class=\"bad\" id=\"message\">" + HtmlEscape(message) + "</p>";
  body +=
      "<form method=\"post\" action=\"/console/login\">"
      "<label>Admin password <input type=\"password\" name=\"password\" autofocus "
      "autocomplete=\"current-password\"></label> <button type=\"submit\">Log in</button></form>";
  r.body = Page("Log in", body);
  return r;
}

HttpResponse Console::Login(const HttpRequest& request, int64_t now_wall_ms) {
  if (now_wall_ms < next_login_ms_) {
    return LoginPage("Too many failed logins: wait a few seconds.", 429);
  }
  const std::string password = FormValue(request.body, "password");
  if (password.empty() || !server_.instance().CheckAdminPassword(password)) {
    login_penalty_ms_ = std::clamp<int64_t>(login_penalty_ms_ * 2, 250, kMaxLoginPenaltyMs);
    next_login_ms_ = now_wall_ms + login_penalty_ms_;
    DQ_LOG(kWarning, "console: a failed login (the admin password did not match)");
    return LoginPage("Wrong password.", 403);
  }
  login_penalty_ms_ = 0;
  const std::string session = "admin." + std::to_string(now_wall_ms + kSessionMs);
  HttpResponse r = Redirect("/console");
  r.headers.emplace_back("Set-Cookie", std::string(kCookie) + "=" + session + "." + Sign(session) +
                                           "; Path=/console; HttpOnly; SameSite=Strict; Max-Age=" +
                                           std::to_string(kSessionMs / 1000));
  return r;
}

HttpResponse Console::Overview(const HttpRequest& request, std::string_view session,
                               int64_t now_wall_ms) {
  using F = queue::QueueFigures;
  const std::string filter = FormValue(request.query, "q");
  size_t page = 0;
  {
    const std::string p = FormValue(request.query, "page");
    std::from_chars(p.data(), p.data() + p.size(), page);
  }
  std::string body = "<header><h1>deferq console</h1><span class=\"muted\">instance " +
                     HtmlEscape(static_cast<const queue::ServerContext&>(server_).instance_id()) +
                     " &middot; admin <form class=\"inline\" method=\"post\" "
                     "action=\"/console/logout\"><input type=\"hidden\" name=\"csrf\" value=\"" +
                     CsrfToken(session) +
                     "\"><button type=\"submit\">Log out</button></form></span></header>";

  body +=
      "<h2>Pools</h2><table id=\"pools\"><tr><th>pool</th><th>address</th><th>connections "
      "up</th><th>writes</th><th>requests</th><th>failures</th></tr>";
  for (const queue::PoolSnapshot& p : server_.Pools()) {
    body += "<tr><td>" + HtmlEscape(p.name) + "</td><td>" + HtmlEscape(p.addr) + "</td><td" +
            std::string(p.connections_up == 0 ? " class=\"bad\"" : "") + ">" +
            std::to_string(p.connections_up) + " / " + std::to_string(p.connections) + "</td><td" +
            (std::string_view(p.writes) == "ok" ? "" : " class=\"bad\"") + ">" +
            HtmlEscape(p.writes) + "</td>" + Cell(static_cast<int64_t>(p.requests)) +
            Cell(static_cast<int64_t>(p.failures)) + "</tr>";
  }
  body += "</table>";

  const auto snap = server_.instance().queue_stats().Load();
  std::map<std::string, int64_t> p99;
  for (const auto& [tag, h] : server_.instance().lateness().Snapshot()) {
    if (h != nullptr) p99[tag] = h->Quantile(0.99);
  }
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
    body += "<p class=\"muted\">Figures read from Redis " + std::string(age) +
            " s ago (every 2 s; at most server.metrics_max_queues queues).</p>";
    std::vector<const std::pair<const std::string, F>*> shown;
    for (const auto& entry : snap->queues) {
      if (filter.empty() || entry.first.find(filter) != std::string::npos) shown.push_back(&entry);
    }
    const size_t pages = std::max<size_t>(1, (shown.size() + kPageSize - 1) / kPageSize);
    page = std::min(page, pages - 1);
    body +=
        "<table id=\"queues\"><tr><th>namespace</th><th>queue</th><th>ready</th>"
        "<th>delayed</th><th>leased</th><th>dead</th><th>paused</th><th>published</th>"
        "<th>consumed</th><th>acked</th><th>lateness p99 (ms)</th></tr>";
    for (size_t i = page * kPageSize; i < std::min(shown.size(), (page + 1) * kPageSize); ++i) {
      const auto& [tag, f] = *shown[i];
      const queue::QueueName q = queue::QueueName::Parse(tag).value_or(queue::QueueName{"", tag});
      const auto late = p99.find(tag);
      body += "<tr><td>" + HtmlEscape(q.ns) + "</td><td>" + HtmlEscape(q.queue) + "</td>" +
              Cell(f.v[F::kReady]) + Cell(f.v[F::kDelayed]) + Cell(f.v[F::kLeased]) +
              (f.v[F::kDead] > 0 ? "<td class=\"bad\">" + std::to_string(f.v[F::kDead]) + "</td>"
                                 : Cell(0)) +
              "<td>" + (f.v[F::kPaused] != 0 ? "paused" : "") + "</td>" + Cell(f.v[F::kPublished]) +
              Cell(f.v[F::kConsumed]) + Cell(f.v[F::kAcked]) +
              (late == p99.end() ? std::string("<td class=\"muted\">-</td>") : Cell(late->second)) +
              "</tr>";
    }
    body += "</table><p>" + std::to_string(shown.size()) + " queue" +
            (shown.size() == 1 ? "" : "s") + "; page " + std::to_string(page + 1) + " of " +
            std::to_string(pages);
    const std::string q = filter.empty() ? "" : "&amp;q=" + HtmlEscape(filter);
    if (page > 0) {
      body +=
          " &middot; <a href=\"/console?page=" + std::to_string(page - 1) + q + "\">previous</a>";
    }
    if (page + 1 < pages) {
      body += " &middot; <a href=\"/console?page=" + std::to_string(page + 1) + q + "\">next</a>";
    }
    body += "</p>";
  }
  HttpResponse r;
  r.body = Page("Overview", body);
  return r;
}

HttpResponse Console::Handle(const HttpRequest& request, int64_t now_wall_ms) {
  HttpResponse r;
  if (request.path == "/console/login") {
    if (request.method == "POST") {
      r = Login(request, now_wall_ms);
    } else if (request.method == "GET") {
      r = LoginPage("", 200);
    } else {
      r = LoginPage("Only GET and POST.", 405);
    }
  } else {
    const std::string session = SessionOf(request, now_wall_ms);
    if (session.empty()) {
      r = Redirect("/console/login");
    } else if (request.method == "POST") {
      // Every action proves it comes from a page this session was served.
      const std::string csrf = FormValue(request.body, "csrf");
      const std::string expected = CsrfToken(session);
      if (csrf.size() != expected.size() ||
          CRYPTO_memcmp(csrf.data(), expected.data(), expected.size()) != 0) {
        r.status = 403;
        r.content_type = "text/plain; charset=utf-8";
        r.body = "this form did not come from this session's console page\n";
      } else if (request.path == "/console/logout") {
        r = Redirect("/console/login");
        r.headers.emplace_back("Set-Cookie", std::string(kCookie) +
                                                 "=; Path=/console; HttpOnly; SameSite=Strict; "
                                                 "Max-Age=0");
      } else {
        r.status = 404;
        r.content_type = "text/plain; charset=utf-8";
        r.body = "not found\n";
      }
    } else if (request.method != "GET") {
      r.status = 405;
      r.content_type = "text/plain; charset=utf-8";
      r.body = "only GET and POST\n";
    } else if (request.path == "/console" || request.path == "/console/") {
      r = Overview(request, session, now_wall_ms);
    } else {
      r.status = 404;
      r.content_type = "text/plain; charset=utf-8";
      r.body = "not found\n";
    }
  }
  // Never cached, never framed by another site.
  r.headers.emplace_back("Cache-Control", "no-store");
  r.headers.emplace_back("X-Frame-Options", "DENY");
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                         "frame-ancestors 'none'");
  return r;
}

}  // namespace deferq::net
