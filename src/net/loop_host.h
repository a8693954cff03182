// What the loops (net/event_loop.h), the metrics endpoint (net/http_listener.h) and its pages
// (net/metrics_exporter.h) need of the server that runs them: the server-wide facts and counters,
// the queue room's instance, and the other loops. net::Server implements it; the parts below it
// see only this, so none of them includes the Server that holds them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/tls.h"
#include "net/command_metrics.h"
#include "persist/pool.h"
#include "proto/request_parser.h"
#include "queue/context/server_context.h"
#include "queue/service.h"

namespace deferq::net {

class EventLoop;

class LoopHost : public queue::ServerContext, public queue::Peers {
 public:
  // Another loop, reached only through its mailbox(). The loops are fixed before any starts.
  virtual EventLoop& loop(int index) = 0;
  // The queue room's instance-wide state (queue/service.h).
  virtual queue::Instance& instance() = 0;
  virtual const std::vector<persist::ResolvedPool>& pools() const = 0;
  virtual const proto::ParserLimits& parser_limits() const = 0;
  virtual uint64_t NextClientId() = 0;
  // Reserves a client slot; false when max_clients are already connected. ReleaseClient gives
  // one back.
  virtual bool AdmitClient() = 0;
  virtual void ReleaseClient() = 0;
  // Metrics (read by the metrics endpoint on loop 0; written by every loop).
  virtual CommandMetrics& command_metrics() = 0;
  virtual uint64_t WheelTimers() const = 0;
  virtual bool metrics_enabled() const = 0;
  // The pages of the metrics endpoint (net/metrics_exporter.h).
  virtual std::string RenderMetrics() = 0;
  virtual bool CheckHealth(std::string* reason) const = 0;
  // tls.listen's certificate as of now (SIGHUP loads it again); nullptr without tls.listen.
  // Thread-safe: a connection keeps the context it was accepted with.
  virtual std::shared_ptr<io::TlsContext> tls_context() const = 0;

 protected:
  ~LoopHost() = default;
};

}  // namespace deferq::net
