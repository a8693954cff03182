// The server: starts one EventLoop per thread, waits for SIGINT/SIGTERM, then stops the loops
// (each flushes what it owes) and returns. It is also the ServerContext command handlers query
// for server-wide facts (statistics summed over loops, the client registry).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "net/command_metrics.h"
#include "net/event_loop.h"
#include "net/loop_host.h"
#include "persist/pool.h"
#include "proto/request_parser.h"
#include "queue/service.h"

namespace deferq::net {

class Server final : public LoopHost {
 public:
  explicit Server(const Config& config);
  ~Server() override;

  // Serves until SIGINT or SIGTERM. Returns the process exit code (0 after a clean stop, 1 when
  // the server could not start, e.g. io_uring refused or the port taken).
  int Run();

  // ServerContext
  const Config& config() const override { return config_; }
  int threads() const override { return threads_; }
  uint16_t port() const override { return config_.listen_port; }
  int64_t start_time_ms() const override { return start_time_ms_; }
  queue::ServerStatsSnapshot Stats() const override;
  std::string DescribeClient(const queue::Session& session) const override;
  void QueryClients(queue::ClientsQuery query, queue::ClientsDone done) override;

  // queue::Peers
  void Post(int thread, queue::LoopNote note) override;
  const std::string& instance_id() const override { return instance_id_; }
  std::vector<queue::PoolSnapshot> Pools() const override;

  // Used by the loops. The vector of loops is fixed before any loop thread starts; a loop reaches
  // another only through its mailbox().
  EventLoop& loop(int index) override { return *loops_[static_cast<size_t>(index)]; }
  // The queue room's instance-wide state (queue/service.h).
  queue::Instance& instance() override { return *instance_; }
  const std::vector<persist::ResolvedPool>& pools() const override { return pools_; }
  const proto::ParserLimits& parser_limits() const override { return limits_; }
  uint64_t NextClientId() override {
    return next_client_id_.fetch_add(1, std::memory_order_relaxed);
  }
  // Reserves a client slot; false when max_clients are already connected.
  bool AdmitClient() override;
  // Metrics (read by the metrics endpoint on loop 0; written by every loop).
  CommandMetrics& command_metrics() override { return command_metrics_; }
  uint64_t WheelTimers() const override;
  std::string RenderMetrics() override;
  bool CheckHealth(std::string* reason) const override;
  bool metrics_enabled() const override {
    return !config_.metrics_listen.empty() && config_.metrics_listen != "off";
  }
  void ReleaseClient() override { clients_.fetch_sub(1, std::memory_order_relaxed); }
  std::shared_ptr<io::TlsContext> tls_context() const override { return tls_context_.load(); }

 private:
  // SIGHUP: the config file read again and what is reloadable applied (server.loglevel, and
  // tls.listen's certificate and key read again from their files).
  void Reload();
  // Builds tls.listen's context from `config`'s files; false with *error.
  bool LoadTlsContext(const Config& config, std::string* error);
  // Builds the context of rediss:// pools from `config`'s [tls] upstream files, when a pool is
  // one; false with *error.
  bool LoadUpstreamTls(const Config& config, std::string* error);

  Config config_;
  int threads_ = 1;
  int64_t start_time_ms_ = 0;
  proto::ParserLimits limits_;
  std::atomic<uint64_t> next_client_id_{1};
  std::atomic<int64_t> clients_{0};
  // Before the loops: their queue rooms use it until they are destroyed.
  std::unique_ptr<queue::Instance> instance_;
  std::vector<std::unique_ptr<EventLoop>> loops_;
  std::vector<persist::ResolvedPool> pools_;
  CommandMetrics command_metrics_;
  std::string instance_id_;  // random per process: names this instance's pump leases
  // Written by the main thread (startup, SIGHUP), read by the loops when they accept.
  std::atomic<std::shared_ptr<io::TlsContext>> tls_context_;
};

}  // namespace deferq::net
