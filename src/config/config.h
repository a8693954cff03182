// deferq's configuration: what it holds and its defaults. Reading it from the TOML file and the
// command line is config/load.h; the keys of [server], [auth] and [defaults] are config/keys.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/log.h"

namespace deferq {

struct PoolConfig {
  std::string name;                    // [pools.NAME]
  std::string addr;                    // "redis://[user:pass@]host:port[/db]" (standalone)
  std::vector<std::string> cluster;    // Redis Cluster seed URLs
  std::vector<std::string> sentinels;  // "host:port" of Sentinels
  std::string master;                  // Sentinel master name
  std::string sentinel_password;       // AUTH to the Sentinels (never logged)
  std::string master_password;         // AUTH to the master a Sentinel pool finds (never logged)
  bool tls = false;  // a Sentinel pool over TLS: its Sentinels and masters (else rediss://)
  int connections_per_thread = 2;
  int timeout_ms = 1000;  // per-request upstream timeout
  // State changes answer only once WAIT wait_replicas wait_timeout_ms confirmed them (0: off).
  int wait_replicas = 0;
  int wait_timeout_ms = 1000;
};

struct Config {
  // [server]
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 6380;
  int threads = 0;                                // 0 = one per core
  std::string metrics_listen = "127.0.0.1:9380";  // "" or "off": no metrics endpoint
  // Set when the file names metrics_listen: then an address that cannot be bound stops startup;
  // the default address only gives a warning (several instances on one host, the test suites).
  bool metrics_listen_set = false;
  // The console's pages under /console on metrics_listen (net/console.h); off by default.
  bool console = false;
  // The console shows everything and changes nothing: no pause, purge, respawn or delete.
  bool console_read_only = false;
  uint32_t max_clients = 10000;
  uint64_t max_payload = 1024 * 1024;
  uint64_t max_args = 1024 * 1024;
  uint64_t max_bulk_len = 8 * 1024 * 1024;
  uint64_t max_output_buffer = 64 * 1024 * 1024;  // per client; over it the client is dropped
  // Input per client waiting to be parsed (while the client is blocked or owes the most replies
  // a connection may owe); over it the client is dropped, as with Redis's
  // client-query-buffer-limit. Never below max_bulk_len + 64 KiB (see QueryBufferLimit).
  uint64_t max_query_buffer = 64 * 1024 * 1024;
  uint32_t idle_timeout = 0;                         // seconds; 0 = never
  base::LogLevel log_level = base::LogLevel::kInfo;  // lines below it are not written
  uint32_t slowlog_ms = 1000;  // a command slower than this is logged; 0 = never
  // Read the per-queue job figures from Redis for /metrics and INFO (queue/stats/queue_stats.h).
  bool queue_stats = true;
  // At most this many queues get per-queue series on /metrics (lateness, job figures) and lines
  // in INFO queues; the rest are counted in deferq_metrics_queues_dropped_total.
  uint32_t metrics_max_queues = 1000;
  // Delivery timing: with the wheel, each queue's pump runs at the millisecond its next job or
  // lease falls due; without it, only the periodic sweep (every sweep_ms) moves due jobs.
  bool wheel = true;
  uint32_t sweep_ms = 100;
  uint32_t lookahead_ms = 2000;  // delayed jobs are indexed by due time this long ahead
  // A queue that holds no job keeps its counters (QSTAT's totals, its /metrics series) this long,
  // then nothing of it is left in Redis (docs/storage.md "Retention"). 1..86400.
  uint32_t retain_seconds = 600;
  // Blocked consumers are woken through Redis pub/sub when another instance makes jobs ready;
  // false leaves only the 100 ms poll (for comparison).
  bool cross_instance_wake = true;
  // [tls]: clients over TLS on a listener of its own (beside server.listen); port 0 = off.
  std::string tls_listen_host;
  uint16_t tls_listen_port = 0;
  std::string tls_cert_file;       // PEM certificate chain the TLS listener presents
  std::string tls_key_file;        // its key (empty: in cert_file)
  std::string tls_client_ca_file;  // set: clients must present a certificate signed by it
  // To Redis, for rediss:// pools: the CAs the servers' certificates are checked against (empty:
  // the system's) and a client certificate for servers that ask for one.
  std::string tls_upstream_ca_file;
  std::string tls_upstream_cert_file;
  std::string tls_upstream_key_file;
  // [auth]
  bool auth_required = false;
  std::string admin_password_env = "DEFERQ_ADMIN_PASSWORD";
  uint32_t auth_cache_seconds = 5;
  // With auth.required: a connection that has not authenticated this many seconds after it was
  // accepted is closed (unauthenticated connections hold at most a quarter of max_clients).
  uint32_t auth_timeout = 10;
  // [defaults]
  uint32_t default_ttl = 86400;
  uint32_t default_tries = 1;
  uint32_t default_ttr = 120;
  double default_timeout = 0;
  // [pools.*]; when no pool is configured, one pool "default" at redis://127.0.0.1:6379.
  std::vector<PoolConfig> pools;
  // [shards.NAMESPACE] QUEUE = N: the sharded queues, by tag "namespace/queue" (QueueTag,
  // queue_tag.h), N in 2..256 (docs/operations.md "Sharded queues"). A queue not named here has
  // one shard.
  std::map<std::string, int, std::less<>> queue_shards;

  std::string config_file;  // "" when none was given
};

}  // namespace deferq
