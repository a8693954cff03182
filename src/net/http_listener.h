// The HTTP endpoint of server.metrics_listen: GET /metrics (Prometheus text), GET /healthz and,
// with server.console, the console's pages under /console (net/console.h),
// served by loop 0 on its own ring, next to the RESP traffic: no thread of its own, no blocking
// call. Requests are parsed by the nodejs http-parser (Debian's libhttp-parser); only the
// response side is written here.
//
// Bounded per request: at most kMaxConnections at once (more are closed at accept), a request of
// at most kMaxRequestBytes (else 431), and kDeadlineMs from accept to the last byte of the
// response (a slow client is cut off then). One request per connection ("Connection: close").
// Answers: 200, 503 (/healthz with the reason), 404 (other paths), 405 (other methods), 400
// (malformed), 431 (too large).
#pragma once

#include <http_parser.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/io_ring.h"
#include "net/console.h"

namespace deferq::net {

class LoopHost;

class HttpListener final : public io::CompletionHandler {
 public:
  static constexpr size_t kMaxConnections = 16;
  static constexpr size_t kMaxRequestBytes = 8192;
  static constexpr int64_t kDeadlineMs = 5000;

  // `io` is loop 0's ring; `run` runs the console's commands there (EventLoop::RunInternal).
  HttpListener(io::IoRing& io, LoopHost& server, ConsoleRun run);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Listens on "host:port" and arms accept and the deadline tick. False with *error when the
  // address cannot be bound.
  bool Open(const std::string& address, std::string* error);
  // Server stop: no more accepts; open requests are cut off.
  void Shutdown();

  // The accept completions.
  void OnCompletion(const io_uring_cqe& cqe) override;

 private:
  struct Conn;
  // The deadline tick's completions (a handler of its own, so its tag differs from accept's).
  struct Ticker final : io::CompletionHandler {
    HttpListener* owner = nullptr;
    void OnCompletion(const io_uring_cqe& cqe) override;
  };

  void ArmAccept();
  void ArmTick();
  void OnTick();
  void ArmRecv(Conn* c);
  void OnConnCompletion(Conn* c, const io_uring_cqe& cqe);
  void Respond(Conn* c);
  // The connection with that id, if it is still open (a console page answers later).
  Conn* Open(uint64_t id);
  void StartSend(Conn* c);
  void Cut(Conn* c);
  void ReleaseIfDone(Conn* c);

  io::IoRing& io_;
  LoopHost& server_;
  int listen_fd_ = -1;
  bool accept_armed_ = false;
  bool stopping_ = false;
  __kernel_timespec tick_{};
  Ticker ticker_;
  http_parser_settings settings_{};
  std::vector<std::unique_ptr<Conn>> conns_;
  uint64_t next_conn_id_ = 1;
  std::unique_ptr<Console> console_;  // server.console: the pages under /console
};

}  // namespace deferq::net
