// Batched calls: a client's consecutive calls of one script (a pipeline of PUBLISHes, CONSUMEs or
// ACKs, on one queue or spread over many), gathered while the loop handles its input and sent as
// one call when the loop flushes, as the rule it is given makes it (persist/batch_rule.h: the
// storage library's `batch` function, docs/storage.md "Batched calls"); at the flush, the batches
// of clients whose calls go over the same connection are merged too. Redis then pays the fixed cost
// of an FCALL and a round trip once per batch, and the counter writes once per run of calls on one
// queue. Each call stays one whole state change, run in the order sent, and gets its own reply (an
// error reply of its own, or the batch's TRYAGAIN/TIMEOUT).
//
// Order: a client's calls keep their order in its batch; its other requests (another script, a
// plain command) first send its open batches, so its requests still reach Redis in the order it
// sent them. On a Redis Cluster a batch's queues share one hash slot: a client has a batch per
// slot (order holds per queue, and queues of different slots live on different nodes anyway),
// and batches of different clients are not merged. A batch is never held past the loop iteration
// that opened it (PoolClient::Flush).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "persist/batch_rule.h"
#include "persist/scripts.h"
#include "persist/upstream_connection.h"

namespace deferq::persist {

class CallBatcher {
 public:
  using Sink = FcallSink;
  // `stats` (may be null): the pool's counters count the commands a batch carries, not the one
  // request, so that requests, failures, timeouts and unreplicated writes stay per command.
  // `cluster`: batches keep to one hash slot, clients' batches are not merged. `connections`:
  // the pool's connections per thread (a client's calls go over connection affinity % that).
  // `rule`: which scripts batch and how a batch goes as one call (persist/batch_rule.h).
  CallBatcher(Sink sink, const BatchRule& rule, PoolStats* stats, bool cluster = false,
              size_t connections = 1)
      : sink_(std::move(sink)),
        rule_(rule),
        stats_(stats),
        cluster_(cluster),
        connections_(connections) {}

  const BatchRule& rule() const { return rule_; }

  // Adds the call to the client's open batch, or opens one (sending the client's open batches
  // first when they are of another script, or its batch when full).
  void Add(Script script, std::string_view key, std::span<const std::string_view> args,
           uint64_t affinity, UpstreamCallback cb);
  // Sends the client's open batches, if any: before any other request of that client.
  void SendClient(uint64_t affinity);
  // Sends every open batch (the loop's flush), merging those that go over one connection.
  void SendAll();

  // Bounds of one client's batch, and of a merged one: Redis runs it as one call, so it must
  // stay short.
  static constexpr size_t kMaxCalls = 64;
  static constexpr size_t kMaxBytes = 256 * 1024;
  static constexpr size_t kMaxMergedCalls = 256;
  static constexpr size_t kMaxMergedBytes = 512 * 1024;
  // Open batches at once (clients with a batch in this iteration); past it the oldest is sent.
  static constexpr size_t kMaxOpen = 256;

 private:
  struct Batch {
    Script script = Script::kCount;
    uint64_t affinity = 0;
    int slot = -1;                  // its keys' hash slot on a cluster, else -1
    std::vector<std::string> keys;  // its queues, in first use order
    std::vector<uint32_t> at;       // per call: its queue (index into keys)
    // Per call: its argument count, then its arguments (a script call's ARGV).
    std::vector<std::string> args;
    std::vector<UpstreamCallback> cbs;
    size_t bytes = 0;
  };
  // Appends `from`'s calls to `to`.
  static void Merge(Batch& to, Batch& from);
  // One call alone goes as itself; a batch as the rule makes it.
  void Send(Batch batch);

  Sink sink_;
  const BatchRule& rule_;
  PoolStats* stats_;
  const bool cluster_;
  const size_t connections_;
  std::vector<Batch> open_;
};

}  // namespace deferq::persist
