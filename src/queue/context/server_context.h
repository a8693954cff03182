// What the queue room may ask of the running server: configuration, statistics and the client
// registry (ServerContext), and the other loop threads (Peers). Implemented by net::Server, so
// the queue room reads server-wide facts without knowing about threads, rings or sockets.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "queue/context/session.h"

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
  uint64_t query_limit_disconnections = 0;
  uint64_t auth_failures = 0;                // wrong tokens and admin passwords
  uint64_t auth_timeout_disconnections = 0;  // not authenticated within auth.timeout
  uint64_t unauthenticated_evictions = 0;    // closed to keep the unauthenticated share
  bool pump_owner = false;                   // queue::Instance::pump_owner
  int64_t pump_shards = 0;                   // queue::Instance::pumped_shards
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
  uint64_t failures = 0;      // answered TRYAGAIN
  uint64_t timeouts = 0;      // answered TIMEOUT
  uint64_t unreplicated = 0;  // answered NOREPLICAS (wait_replicas not confirmed)
  bool refused = false;       // a handshake check refuses the pool
  // Whether writes go through now: "ok", "evicting" (an evicting policy or an eviction: writes
  // answer TRYAGAIN), "full" (Redis at maxmemory refuses publishes: OOM) or "misconf" (Redis
  // cannot persist: every write refused), and how many were refused for each.
  const char* writes = "ok";
  uint64_t refused_evicting = 0;
  uint64_t refused_oom = 0;
  uint64_t refused_misconf = 0;
};

// A question about clients that every loop thread answers for its own connections (CLIENT LIST,
// INFO clients, CLIENT KILL). kList honours the filter's id and bound_ns; kKill all of it. Loops
// never read each other's connections: the question travels to each loop as a message and the parts
// come back to the asking thread.
struct ClientsQuery {
  enum class Kind { kList, kCount, kKill };
  Kind kind = Kind::kList;
  uint64_t caller_id = 0;  // the asking client (CLIENT KILL SKIPME)
  // CLIENT KILL: a client is killed when every filter given matches it.
  struct Filter {
    std::optional<uint64_t> id;
    std::optional<std::string> addr;
    std::optional<std::string> laddr;
    std::optional<std::string> user;  // the namespace, as CLIENT LIST shows it in user=
    bool none = false;                // TYPE master|replica|slave|pubsub: matches nobody here
    bool skip_me = true;
    // CLIENT LIST of a namespace connection (auth.required): only the connections that
    // authenticated in this namespace (never the admin's). With `id`, only that client.
    std::optional<std::string> bound_ns;
  } filter;
};

// The answer, summed over every loop.
struct ClientsReport {
  std::string error;  // not empty: the query could not be answered; reply with this error
  std::string list;   // kList: one CLIENT LIST line per client, each ending in "\n"
  uint64_t connected = 0;
  uint64_t blocked = 0;            // connections waiting in a blocking command
  uint64_t max_input_buffer = 0;   // largest unparsed input of one connection (bytes)
  uint64_t max_output_buffer = 0;  // largest unsent output of one connection (bytes)
  uint64_t killed = 0;             // kKill
};
using ClientsDone = std::function<void(const ClientsReport&)>;

class Loop;  // queue/context/loop.h

// A message to another loop thread's queue state: run on that thread, with its Loop, at the
// loop's next iteration. Each kind is a lambda at the place that posts it, e.g.
//   peers.Post(t, [tag](Loop& l) { l.waiters().OnQueueReady(tag); });
// Lossy by design: the lane is bounded, and a message that does not fit is dropped and the
// thread told (Service::OnHintsDropped), which then reads again everything a message could have
// told it (blocked queues, pumps, parked calls): a lost message costs latency, never a job.
using LoopNote = std::function<void(Loop&)>;

// The other loop threads of this instance, as the queue room reaches them: by message, never
// by touching their state (implemented by net::Server through the loops' mailboxes).
class Peers {
 public:
  // Runs `note` on thread `thread` (posted; a caller handles its own thread itself).
  virtual void Post(int thread, LoopNote note) = 0;
  // This instance's id (random per process), for the pump leases in Redis.
  virtual const std::string& instance_id() const = 0;

 protected:
  ~Peers() = default;
};

class ServerContext {
 public:
  virtual ~ServerContext() = default;
  virtual const Config& config() const = 0;
  virtual int threads() const = 0;
  virtual uint16_t port() const = 0;
  virtual int64_t start_time_ms() const = 0;
  virtual ServerStatsSnapshot Stats() const = 0;
  // One CLIENT LIST line (without the trailing newline) for the connection owning `session`.
  virtual std::string DescribeClient(const Session& session) const = 0;
  // Asks every loop thread about its clients. `done` runs later on the calling thread (call it
  // from a command that has deferred its reply), or at once with `error` set when the query
  // cannot start (too many in flight on this thread).
  virtual void QueryClients(ClientsQuery query, ClientsDone done) = 0;
  // This process's random id (INFO server run_id; the pump leases in Redis).
  virtual const std::string& instance_id() const = 0;
  // Upstream pools (INFO pools).
  virtual std::vector<PoolSnapshot> Pools() const = 0;
};

}  // namespace deferq::queue
