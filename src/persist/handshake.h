// The setup steps every upstream connection runs before it carries traffic (SPEC §4): AUTH and
// SELECT, the pool checks (maxmemory-policy noeviction, Redis >= 7.0, AOF), and loading the
// storage scripts' Redis Functions library, so that no FCALL ever meets a Redis without it.
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

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "redis_url.h"

struct redisReply;

namespace deferq::persist {

struct SetupVerdict {
  enum Kind { kPass, kWarn, kRefuse };
  Kind kind = kPass;
  std::string text;  // kWarn: the warning; kRefuse: the reason, without the pool's name
};

struct SetupStep {
  std::string request;  // RESP-encoded command
  // Sent only once every earlier step has passed: what writes to Redis (loading scripts) waits
  // for the checks, so a refused pool gets nothing. Steps between two such marks are pipelined.
  bool after_checks = false;
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

}  // namespace deferq::persist
