// The setup steps every upstream connection runs before it carries traffic (docs/operations.md,
// failures): AUTH and SELECT, the pool checks (maxmemory-policy noeviction, Redis >= 7.0, AOF, not
// loading its dataset), and loading the storage scripts' Redis Functions library when the pool
// lacks this version of it, so that no FCALL ever meets a Redis without it.
//
// API:
// - BuildHandshake(url) lists the steps in the order they run. A step is a RESP request and a
//   check of its reply; adding one is one more entry.
// - UpstreamConnection sends them pipelined right after connect (the checks in one write, then the
//   loads in another once the checks passed) and holds every request queued meanwhile. The
//   replies are checked in order: the first refusal closes the connection with its reason
//   ("maxmemory-policy is allkeys-lru, deferq needs noeviction"), which commands then answer as
//   "-TRYAGAIN pool '<name>' unavailable: <reason>"; the connection keeps retrying with backoff, so
//   fixing Redis heals it without restarting deferq.
// - CheckPool (pool.h) runs the same list once, blocking, at startup: the rules of the first
//   connection and of every reconnect after a restart or failover are one and the same.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "config/redis_url.h"

struct redisReply;

namespace deferq::persist {

struct SetupVerdict {
  enum Kind { kPass, kWarn, kRefuse };
  Kind kind = kPass;
  std::string text;  // kWarn: the warning; kRefuse: the reason, without the pool's name
  // Passed, and the pool has this version of the library already (FUNCTION LIST found it).
  bool library_present = false;
};

struct SetupStep {
  std::string request;  // RESP-encoded command
  // Sent only once every earlier step has passed: what writes to Redis (loading scripts) waits
  // for the checks, so a refused pool gets nothing. Steps between two such marks are pipelined.
  bool after_checks = false;
  // The library load: skipped when an earlier check found the library present.
  bool loads_library = false;
  // Judges the reply (an error reply included). Must not keep the reply.
  std::function<SetupVerdict(const redisReply& reply)> check;
};

using Handshake = std::vector<SetupStep>;

// The steps of a connection to `url`, in the order they are sent and checked.
Handshake BuildHandshake(const RedisUrl& url);

// The checks of the handshake, one per fact, exposed for unit tests.
SetupVerdict CheckEvictionPolicy(const redisReply& config_get_reply);  // CONFIG GET
SetupVerdict CheckRedisVersion(const redisReply& info_server_reply);   // INFO server
SetupVerdict CheckPersistence(const redisReply& info_persistence_reply);
SetupVerdict CheckLibraryPresent(const redisReply& function_list_reply);  // FUNCTION LIST

// The pool's health while it serves (docs/operations.md, failures): what every ready connection
// asks every kHealthCheckMs, and the rule that reads its answer.
inline constexpr int64_t kHealthCheckMs = 500;
// "INFO memory stats", RESP-encoded.
const std::string& HealthRequest();
// Why writes must be refused now, or "" when they are safe: an evicting maxmemory-policy (set
// with CONFIG SET on the live Redis), or keys evicted since the last reading (evicted_keys grew:
// an eviction happened between two readings, whatever the policy says now). *evicted_keys is the
// count read last (-1 before the first reading) and is updated. A reply without the fields (INFO
// renamed away) refuses nothing.
std::string WriteRefusal(const redisReply& info_memory_stats_reply, int64_t* evicted_keys);

}  // namespace deferq::persist
