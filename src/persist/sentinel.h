// Sentinel pools (`sentinels = ["h:p", ...]`, `master = "name"`): the pool's Redis is whichever
// node the Sentinels currently name master.
//
// API:
// - SentinelMaster (one per pool, shared by every thread) holds the master's address as the
//   Sentinels last named it. It is the EndpointSource of all the pool's connections: they connect
//   to Current(), reconnect when generation() moves, and Suspect() it when the node they reached
//   refused (ROLE is not master, READONLY) or could not be reached.
// - SentinelWatcher runs on one loop thread (the first to ClaimWatcher()). It keeps two
//   connections to the Sentinels, each trying them in turn: one asks
//   `SENTINEL get-master-addr-by-name` (at start, once a second as a safety net, and soon after a
//   connection suspected the master), the other is subscribed to `+switch-master` and applies a
//   promotion the moment a Sentinel announces it. Everything is asynchronous on the loop's ring.
// - FindMasterBlocking asks the Sentinels once, blocking: startup (main thread) only.
// - BuildMasterHandshake is the usual handshake (persist/handshake.h) with a `ROLE` check before
//   anything is written, so no connection ever writes to a replica or a demoted master.
//
// Why one watcher per process and not per thread: the Sentinels' view is one fact; every thread
// reads it from SentinelMaster (a leaf mutex held for a copy) and notices a new generation at its
// next 100 ms tick at the latest.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "config/redis_url.h"
#include "persist/endpoint.h"
#include "persist/handshake.h"

struct redisReply;

namespace deferq {
struct PoolConfig;
namespace io {
class IoRing;
}
}  // namespace deferq

namespace deferq::persist {

struct PoolStats;
class UpstreamConnection;

class SentinelMaster final : public EndpointSource {
 public:
  SentinelMaster(std::string pool_name, std::string master_name, std::vector<Endpoint> sentinels,
                 std::string sentinel_password, bool tls);
  ~SentinelMaster() override;

  bool Current(Endpoint* out, std::string* why) const override;
  uint64_t generation() const override { return generation_.load(std::memory_order_acquire); }
  void Suspect() override { suspected_.store(true, std::memory_order_relaxed); }

  // The Sentinels named `master`; a different address than before starts a new generation.
  void Update(const Endpoint& master, const char* how);
  // Whether a connection suspected the master since the last call.
  bool TakeSuspicion() { return suspected_.exchange(false, std::memory_order_relaxed); }
  // True for the first caller only: that thread runs the SentinelWatcher.
  bool ClaimWatcher() { return !watcher_claimed_.exchange(true); }
  // "host:port" of the current master, or "?" while unknown (INFO).
  std::string Describe() const;

  const std::string& pool_name() const { return pool_name_; }
  const std::string& master_name() const { return master_name_; }
  const std::vector<Endpoint>& sentinels() const { return sentinels_; }
  const std::string& sentinel_password() const { return sentinel_password_; }
  // The pool's `tls`: its Sentinels are asked over TLS too.
  bool tls() const { return tls_; }
  PoolStats* sentinel_stats() { return sentinel_stats_.get(); }

 private:
  const std::string pool_name_;
  const std::string master_name_;
  const std::vector<Endpoint> sentinels_;
  const std::string sentinel_password_;
  const bool tls_;
  std::unique_ptr<PoolStats> sentinel_stats_;  // the watcher's connections (not in INFO pools)
  mutable base::Mutex mu_;                     // leaf: held for a copy of master_
  Endpoint master_ DQ_GUARDED_BY(mu_);         // port 0: unknown
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> suspected_{false};
  std::atomic<bool> watcher_claimed_{false};
};

// Resolves the configured Sentinels (getaddrinfo: main thread only) into a SentinelMaster.
bool ResolveSentinels(const PoolConfig& config, std::shared_ptr<SentinelMaster>* out,
                      std::string* error);

// Asks each Sentinel in turn (blocking, 1 s per Sentinel) for the master's address; records it
// in `master` and answers it. False with *why when none answered.
bool FindMasterBlocking(SentinelMaster& master, Endpoint* out, std::string* why);

// The handshake of a connection to a Sentinel pool's master: the usual steps with ROLE checked
// among the checks, before anything is written.
Handshake BuildMasterHandshake(const RedisUrl& url);
// ROLE's first element must be "master"; anything else refuses the node.
SetupVerdict CheckRole(const redisReply& role_reply);
// Whether a refusal came from CheckRole (a failover in progress rather than a misconfiguration).
bool IsRoleRefusal(const SetupVerdict& verdict);

// Parses a `+switch-master` message, "<name> <old-ip> <old-port> <new-ip> <new-port>".
bool ParseSwitchMaster(std::string_view message, std::string_view master_name, Endpoint* out);

class SentinelWatcher {
 public:
  SentinelWatcher(io::IoRing& io, std::shared_ptr<SentinelMaster> master, int timeout_ms);
  ~SentinelWatcher();

  void Flush();
  void Tick();
  void Shutdown();
  bool quiescent() const;

 private:
  void Ask();

  io::IoRing& io_;
  std::shared_ptr<SentinelMaster> master_;
  std::shared_ptr<EndpointSource> query_sentinels_;   // rotates on failure
  std::shared_ptr<EndpointSource> events_sentinels_;  // rotates on failure
  std::unique_ptr<UpstreamConnection> query_;
  std::unique_ptr<UpstreamConnection> events_;
  bool asking_ = false;
  int64_t next_ask_ms_ = 0;
};

}  // namespace deferq::persist
