// Batched calls: a client's consecutive calls of one script on one queue (a pipeline of
// PUBLISHes, CONSUMEs or ACKs on a queue), gathered while the loop handles its input and sent as
// one call of the `batch` function when the loop flushes (scripts/batch.lua; docs/storage.md
// "Batched calls"). Redis then pays the fixed cost of an FCALL and the counter writes once per
// batch instead of once per call. Each call stays one whole state change, run in the order sent,
// and gets its own reply (an error reply of its own, or the batch's TRYAGAIN/TIMEOUT).
//
// Order: a client's other requests (another script, another queue, a plain command) first send
// its open batches, so its requests still reach Redis in the order it sent them. The shards of one
// sharded queue (keys "...Q#i...", queue/shards.h) each keep an open batch of their own, as order
// holds per shard only. A batch is never held past the loop iteration that opened it
// (PoolClient::Flush).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "persist/scripts.h"
#include "persist/upstream_connection.h"

namespace deferq::persist {

class CallBatcher {
 public:
  // Sends one FCALL: the script, its KEYS[1], its arguments (the pool keys are the sink's).
  using Sink = std::function<void(Script, std::string_view key, std::span<const std::string_view>,
                                  uint64_t affinity, UpstreamCallback)>;
  // `stats` (may be null): the pool's counters count the commands a batch carries, not the one
  // request, so that requests, failures, timeouts and unreplicated writes stay per command.
  CallBatcher(Sink sink, PoolStats* stats) : sink_(std::move(sink)), stats_(stats) {}

  // The scripts batch.lua runs: the client-driven state changes of one queue.
  static bool Batchable(Script s);

  // Adds the call to the client's open batch, or opens one (sending the client's open batch
  // first when it is for another script or queue, or full).
  void Add(Script script, std::string_view key, std::span<const std::string_view> args,
           uint64_t affinity, UpstreamCallback cb);
  // Sends the client's open batches, if any: before any other request of that client.
  void SendClient(uint64_t affinity);
  // Sends every open batch (the loop's flush).
  void SendAll();

  // Bounds of one batch: Redis runs it as one call, so it must stay short.
  static constexpr size_t kMaxCalls = 64;
  static constexpr size_t kMaxBytes = 256 * 1024;
  // Open batches at once (clients with a batch in this iteration); past it the oldest is sent.
  static constexpr size_t kMaxOpen = 256;

 private:
  struct Batch {
    Script script = Script::kCount;
    uint64_t affinity = 0;
    std::string key;
    // Per call: its argument count, then its arguments (batch.lua's ARGV after the name).
    std::vector<std::string> args;
    std::vector<UpstreamCallback> cbs;
    size_t bytes = 0;
  };
  // A batch of one-id ACKs of one ms goes as one call of acks.lua, one reply per ACK; any other
  // batch as one call of batch.lua.
  void Send(Batch batch);
  // A batch of one-job consumes with the same arguments (a pipeline of CONSUMEs) goes as one
  // consume call of COUNT n, and each call gets its job, in order (docs/storage.md "Batched
  // calls"): a consume batch's fixed cost per call is more than the lease itself.
  void SendConsumes(Batch batch);

  Sink sink_;
  PoolStats* stats_;
  std::vector<Batch> open_;
};

}  // namespace deferq::persist
