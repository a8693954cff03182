// One connection to a Redis as a backend drives it: requests in, a result per request out.
// UpstreamConnection (persist/upstream_connection.h) is the real one, over the loop's ring;
// ClusterPool opens its node connections through this interface, so its routing (slot map,
// MOVED/ASK, retries) is unit-tested over fake links (tests/unit/persist/cluster_routing_test.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "persist/reply_view.h"
#include "persist/scripts.h"

struct redisReply;

namespace deferq::persist {

// A reply, or an error text when the request never got one.
struct UpstreamResult {
  const redisReply* reply = nullptr;
  // When reply is null: "TRYAGAIN pool 'default' unavailable[: reason]" (never sent),
  // "TIMEOUT pool 'default' did not answer: the command may have been applied" (sent), or
  // "NOREPLICAS pool 'default' ..." (applied on the master; wait_replicas not confirmed).
  std::string_view error;
  ReplyView view() const { return reply; }
};
using UpstreamCallback = std::function<void(const UpstreamResult&)>;

// The error an upstream call met (the connection's, or Redis's error reply as it came), or ""
// when Redis answered something else.
std::string FailureOf(const UpstreamResult& r);

// What became of an upstream call: the one place that reads the kind from the text.
enum class UpstreamOutcome {
  kReply,         // Redis answered it (an error reply included: FailureOf has it)
  kNotSent,       // "TRYAGAIN pool ...": never reached Redis, or Redis did not run it
  kRefused,       // "OOM pool ..." / "MISCONF pool ...": Redis refused the write, applied nothing
  kTimedOut,      // "TIMEOUT pool ...": sent, not answered: it may have been applied
  kUnreplicated,  // "NOREPLICAS pool ...": applied on the master, too few replicas confirmed it
  kUnexpected,    // a reply of another shape than the call's (kUnexpectedReply)
};
UpstreamOutcome OutcomeOf(const UpstreamResult& r);
// Nothing was applied, so the same call may be sent again (kNotSent, kRefused).
inline bool NotApplied(const UpstreamResult& r) {
  const UpstreamOutcome o = OutcomeOf(r);
  return o == UpstreamOutcome::kNotSent || o == UpstreamOutcome::kRefused;
}

class UpstreamLink {
 public:
  virtual ~UpstreamLink() = default;

  // Queues a RESP-encoded command; `cb` runs once with its result. `script` names the function of
  // an FCALL (Script::kCount for anything else); `affinity` names the client whose requests keep
  // their order.
  virtual void Send(std::string request, Script script, uint64_t affinity, UpstreamCallback cb) = 0;
  // Connected and through the handshake: a request sent now goes on the wire.
  virtual bool ready() const = 0;
  // Requests will be served (now, or once connect and handshake are through).
  virtual bool accepting() const = 0;
  virtual void Flush() = 0;  // once per loop iteration: writes what was queued
  virtual void Tick() = 0;   // once per loop tick: timeouts, reconnects
  virtual void Shutdown() = 0;
  virtual bool quiescent() const = 0;  // no operation of its own in flight
};

}  // namespace deferq::persist
