// What command handlers may ask of the running server: configuration, statistics and the client
// registry. Implemented by net::Server, so the queue room reads server-wide facts without
// knowing about threads, rings or sockets.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "queue/lateness.h"
#include "queue/session.h"

namespace deferq::queue {

struct ServerStatsSnapshot {
  uint64_t connected_clients = 0;
  uint64_t blocked_clients = 0;
  uint64_t total_connections_received = 0;
  uint64_t rejected_connections = 0;
  uint64_t total_commands_processed = 0;
  uint64_t total_net_input_bytes = 0;
  uint64_t total_net_output_bytes = 0;
  uint64_t protocol_errors = 0;
  uint64_t output_limit_disconnections = 0;
};

// One upstream pool as INFO shows it (summed over every thread's connections).
struct PoolSnapshot {
  std::string name;
  std::string addr;  // host:port
  int connections_up = 0;
  int connections = 0;  // configured: connections_per_thread x threads
  int64_t inflight = 0;
  int64_t latency_us = 0;
  uint64_t requests = 0;
  uint64_t failures = 0;  // answered TRYAGAIN
  uint64_t timeouts = 0;  // answered TIMEOUT
  bool refused = false;   // a handshake check refuses the pool
};

class ServerContext {
 public:
  virtual ~ServerContext() = default;
  virtual const Config& config() const = 0;
  virtual int threads() const = 0;
  virtual uint16_t port() const = 0;
  virtual int64_t start_time_ms() const = 0;
  virtual ServerStatsSnapshot Stats() const = 0;
  // True when `password` equals the admin password read at startup from the environment
  // variable auth.admin_password_env (always false when that variable is unset or empty).
  virtual bool CheckAdminPassword(std::string_view password) const = 0;
  // One CLIENT LIST line (without the trailing newline) for the connection owning `session`.
  virtual std::string DescribeClient(const Session& session) const = 0;
  // CLIENT LIST: one line per connected client on every thread, each ending in "\n".
  virtual std::string ListClients() const = 0;
  // Delivery lateness per queue (INFO queues).
  virtual LatenessStats& lateness() = 0;
  // Upstream pools (INFO pools).
  virtual std::vector<PoolSnapshot> Pools() const = 0;
};

}  // namespace deferq::queue
