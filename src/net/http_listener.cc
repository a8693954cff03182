#include "net/http_listener.h"

#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "config/config.h"
#include "net/listener.h"
#include "net/loop_host.h"

namespace deferq::net {

using base::MonotonicMs;
using base::RealtimeMs;

// One request's parse state, reached from http-parser's callbacks through parser.data. Every
// part is bounded by kMaxRequestBytes (the whole request is). Not in the anonymous namespace:
// HttpListener::Conn holds one.
struct HttpParseState {
  std::string url;
  std::string field;  // the header field being read
  std::string value;  // and its value
  bool in_value = false;
  std::string cookie;
  std::string body;
  bool complete = false;

  void EndHeader() {
    if (in_value && field.size() == 6 && strncasecmp(field.c_str(), "cookie", 6) == 0) {
      if (!cookie.empty()) cookie += "; ";
      cookie += value;
    }
    field.clear();
    value.clear();
    in_value = false;
  }
};

namespace {

constexpr int64_t kHttpTickMs = 250;

int OnUrl(http_parser* p, const char* at, size_t len) {
  static_cast<HttpParseState*>(p->data)->url.append(at, len);
  return 0;
}

int OnHeaderField(http_parser* p, const char* at, size_t len) {
  auto* r = static_cast<HttpParseState*>(p->data);
  if (r->in_value) r->EndHeader();
  r->field.append(at, len);
  return 0;
}

int OnHeaderValue(http_parser* p, const char* at, size_t len) {
  auto* r = static_cast<HttpParseState*>(p->data);
  r->in_value = true;
  r->value.append(at, len);
  return 0;
}

int OnHeadersComplete(http_parser* p) {
  static_cast<HttpParseState*>(p->data)->EndHeader();
  return 0;
}

int OnBody(http_parser* p, const char* at, size_t len) {
  static_cast<HttpParseState*>(p->data)->body.append(at, len);
  return 0;
}

int OnMessageComplete(http_parser* p) {
  static_cast<HttpParseState*>(p->data)->complete = true;
  // Stop here: anything after the first request is ignored (one request per connection).
  http_parser_pause(p, 1);
  return 0;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 303:
      return "See Other";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Internal Server Error";
  }
}

std::string Response(int status, const char* content_type, const std::string& body, bool allow_get,
                     const std::vector<std::pair<std::string, std::string>>& headers = {}) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) + "\r\n";
  out += "Content-Type: ";
  out += content_type;
  out += "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  if (allow_get) out += "Allow: GET\r\n";
  for (const auto& [name, value] : headers) out += name + ": " + value + "\r\n";
  out += "Connection: close\r\n\r\n";
  out += body;
  return out;
}

}  // namespace

struct HttpListener::Conn final : io::CompletionHandler {
  HttpListener* owner = nullptr;
  uint64_t id = 0;
  int fd = -1;
  int ops = 0;          // operations in flight naming this connection
  bool closed = false;  // shut down; the fd is closed once ops reach 0
  bool responded = false;
  int64_t deadline_ms = 0;
  http_parser parser{};
  HttpParseState request;
  size_t received = 0;
  char in[kMaxRequestBytes];
  std::string out;
  size_t out_off = 0;

  void OnCompletion(const io_uring_cqe& cqe) override { owner->OnConnCompletion(this, cqe); }
};

HttpListener::HttpListener(io::IoRing& io, LoopHost& server, ConsoleRun run)
    : io_(io), server_(server) {
  ticker_.owner = this;
  http_parser_settings_init(&settings_);
  settings_.on_url = OnUrl;
  settings_.on_header_field = OnHeaderField;
  settings_.on_header_value = OnHeaderValue;
  settings_.on_headers_complete = OnHeadersComplete;
  settings_.on_body = OnBody;
  settings_.on_message_complete = OnMessageComplete;
  if (server_.config().console) console_ = std::make_unique<Console>(server_, std::move(run));
}

HttpListener::~HttpListener() {
  // The ring is gone (or going) by now: no completion will reach these objects again.
  for (auto& c : conns_) {
    if (c->fd >= 0) close(c->fd);
  }
  if (listen_fd_ >= 0) close(listen_fd_);
}

bool HttpListener::Open(const std::string& address, std::string* error) {
  const size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const int port = std::atoi(address.c_str() + colon + 1);
  listen_fd_ = OpenExclusiveListener(host, static_cast<uint16_t>(port), error);
  if (listen_fd_ < 0) {
    *error = "metrics: " + *error;
    return false;
  }
  ArmAccept();
  ArmTick();
  DQ_LOG(kInfo, "serving metrics on http://%s/metrics and /healthz", address.c_str());
  return true;
}

void HttpListener::ArmAccept() {
  io_uring_sqe* sqe = io_.GetSqe();
  io_uring_prep_multishot_accept(sqe, listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
  io_uring_sqe_set_data64(sqe, io::ExternalTag(this));
  accept_armed_ = true;
}

void HttpListener::ArmTick() {
  tick_.tv_sec = 0;
  tick_.tv_nsec = kHttpTickMs * 1000000;
  io_uring_sqe* sqe = io_.GetSqe();
  io_uring_prep_timeout(sqe, &tick_, 0, 0);
  io_uring_sqe_set_data64(sqe, io::ExternalTag(&ticker_));
}

void HttpListener::Ticker::OnCompletion(const io_uring_cqe&) { owner->OnTick(); }

void HttpListener::OnCompletion(const io_uring_cqe& cqe) {
  const bool more = cqe.flags & IORING_CQE_F_MORE;
  if (!more) accept_armed_ = false;
  if (cqe.res >= 0) {
    const int fd = cqe.res;
    // At the cap, refuse: conns_ holds every connection not yet released (ReleaseIfDone drops
    // one once it is closed and its last operation has reported back).
    if (stopping_ || conns_.size() >= kMaxConnections) {
      close(fd);
    } else {
      auto conn = std::make_unique<Conn>();
      Conn* c = conn.get();
      c->owner = this;
      c->id = next_conn_id_++;
      c->fd = fd;
      c->deadline_ms = MonotonicMs() + kDeadlineMs;
      http_parser_init(&c->parser, HTTP_REQUEST);
      c->parser.data = &c->request;
      conns_.push_back(std::move(conn));
      ArmRecv(c);
    }
  } else if (cqe.res != -ECANCELED && cqe.res != -EINVAL && cqe.res != -EBADF) {
    DQ_LOG(kWarning, "metrics: accept failed: %s", strerror(-cqe.res));
  }
  // A multishot accept that ended (EMFILE...) is re-armed by the next tick.
}

void HttpListener::OnTick() {
  if (stopping_) return;  // the tick ends with the server
  ArmTick();
  if (!accept_armed_) ArmAccept();
  const int64_t now = MonotonicMs();
  std::vector<Conn*> late;
  for (auto& c : conns_) {
    if (!c->closed && now >= c->deadline_ms) late.push_back(c.get());
  }
  for (Conn* c : late) {
    Cut(c);            // slow to send its request or to read, or a page slow to answer
    ReleaseIfDone(c);  // a page still waiting for its commands has no operation in flight
  }
}

void HttpListener::ArmRecv(Conn* c) {
  io_uring_sqe* sqe = io_.GetSqe();
  io_uring_prep_recv(sqe, c->fd, c->in + c->received, sizeof(c->in) - c->received, 0);
  io_uring_sqe_set_data64(sqe, io::ExternalTag(c));
  c->ops++;
}

void HttpListener::OnConnCompletion(Conn* c, const io_uring_cqe& cqe) {
  c->ops--;
  if (c->closed) return ReleaseIfDone(c);
  if (c->responded) {
    // A send completed.
    if (cqe.res <= 0) {
      Cut(c);
    } else {
      c->out_off += static_cast<size_t>(cqe.res);
      if (c->out_off < c->out.size()) {
        StartSend(c);
      } else {
        Cut(c);  // all written: close (Connection: close)
      }
    }
    return ReleaseIfDone(c);
  }
  if (cqe.res <= 0) {
    Cut(c);  // EOF or error before a whole request: nothing to answer
    return ReleaseIfDone(c);
  }
  const size_t n = static_cast<size_t>(cqe.res);
  const char* data = c->in + c->received;
  c->received += n;
  http_parser_execute(&c->parser, &settings_, data, n);
  const enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);
  if (c->request.complete || (err != HPE_OK && err != HPE_PAUSED) || c->received == sizeof(c->in)) {
    Respond(c);
  } else {
    ArmRecv(c);
  }
  ReleaseIfDone(c);
}

void HttpListener::Respond(Conn* c) {
  c->responded = true;
  const enum http_errno err = HTTP_PARSER_ERRNO(&c->parser);
  if (!c->request.complete && err != HPE_OK && err != HPE_PAUSED) {
    c->out = Response(400, "text/plain; charset=utf-8",
                      std::string("bad request: ") + http_errno_description(err) + "\n", false);
  } else if (!c->request.complete) {
    c->out = Response(431, "text/plain; charset=utf-8",
                      "request over " + std::to_string(kMaxRequestBytes) + " bytes\n", false);
  } else {
    const size_t question = c->request.url.find('?');
    std::string path = c->request.url.substr(0, question);
    const bool known = path == "/metrics" || path == "/healthz";
    if (console_ != nullptr && Console::Owns(path)) {
      HttpRequest request;
      request.method = http_method_str(static_cast<http_method>(c->parser.method));
      request.path = std::move(path);
      if (question != std::string::npos) request.query = c->request.url.substr(question + 1);
      request.cookie = std::move(c->request.cookie);
      request.body = std::move(c->request.body);
      // Answered now or once the page's commands are in; the connection may be gone by then.
      console_->Handle(request, RealtimeMs(), [this, id = c->id](HttpResponse r) {
        Conn* c = Open(id);
        if (c == nullptr) return;
        c->out = Response(r.status, r.content_type.c_str(), r.body, false, r.headers);
        StartSend(c);
      });
      return;
    } else if (!known) {
      c->out = Response(404, "text/plain; charset=utf-8", "not found\n", false);
    } else if (c->parser.method != HTTP_GET) {
      c->out = Response(405, "text/plain; charset=utf-8", "only GET\n", true);
    } else if (path == "/metrics") {
      c->out =
          Response(200, "text/plain; version=0.0.4; charset=utf-8", server_.RenderMetrics(), false);
    } else {
      std::string reason;
      if (server_.CheckHealth(&reason)) {
        c->out = Response(200, "text/plain; charset=utf-8", "ok\n", false);
      } else {
        c->out = Response(503, "text/plain; charset=utf-8", reason + "\n", false);
      }
    }
  }
  StartSend(c);
}

HttpListener::Conn* HttpListener::Open(uint64_t id) {
  for (auto& c : conns_) {
    if (c->id == id) return c->closed ? nullptr : c.get();
  }
  return nullptr;
}

void HttpListener::StartSend(Conn* c) {
  io_uring_sqe* sqe = io_.GetSqe();
  io_uring_prep_send(sqe, c->fd, c->out.data() + c->out_off, c->out.size() - c->out_off,
                     MSG_NOSIGNAL);
  io_uring_sqe_set_data64(sqe, io::ExternalTag(c));
  c->ops++;
}

void HttpListener::Cut(Conn* c) {
  if (c->closed) return;
  c->closed = true;
  // Completes the recv or send in flight; the fd is closed once it has reported back, so no
  // operation ever sees a reused fd number.
  shutdown(c->fd, SHUT_RDWR);
}

void HttpListener::ReleaseIfDone(Conn* c) {
  if (!c->closed || c->ops > 0) return;
  close(c->fd);
  c->fd = -1;
  for (size_t i = 0; i < conns_.size(); ++i) {
    if (conns_[i].get() == c) {
      conns_[i] = std::move(conns_.back());
      conns_.pop_back();
      return;
    }
  }
}

void HttpListener::Shutdown() {
  if (stopping_) return;
  stopping_ = true;
  if (listen_fd_ >= 0) {
    shutdown(listen_fd_, SHUT_RDWR);
    if (accept_armed_) {
      io_uring_sqe* sqe = io_.GetSqe();
      io_uring_prep_cancel_fd(sqe, listen_fd_, 0);
      // Tagged to the ticker, which ignores completions once stopping: as an accept, the
      // cancel's result 0 would read as fd 0.
      io_uring_sqe_set_data64(sqe, io::ExternalTag(&ticker_));
    }
  }
  for (auto& c : conns_) Cut(c.get());
}

}  // namespace deferq::net
