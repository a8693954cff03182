// The slot map of a Redis Cluster pool: which master serves which of the 16384 slots, as
// CLUSTER SLOTS tells it, where a redirection says a slot went, and the slots known to hold queues.
// Pure pieces (parsing, no I/O) but for the two startup calls, which block (main thread).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/redis_url.h"
#include "persist/blocking_link.h"
#include "persist/cluster_slots.h"
#include "persist/endpoint.h"

struct redisReply;

namespace deferq::persist {

// The slots of a pool that hold queues, as far as this process knows: shared by every thread
// (relaxed atomics; a stale bit costs one extra read or a late pump, never a job).
class SlotSet {
 public:
  bool Test(int slot) const {
    return (words_[slot / 64].load(std::memory_order_relaxed) >> (slot % 64)) & 1;
  }
  void Set(int slot) {
    if (!Test(slot)) words_[slot / 64].fetch_or(Bit(slot), std::memory_order_relaxed);
  }
  void Clear(int slot) {
    if (Test(slot)) words_[slot / 64].fetch_and(~Bit(slot), std::memory_order_relaxed);
  }

 private:
  static uint64_t Bit(int slot) { return uint64_t{1} << (slot % 64); }
  std::array<std::atomic<uint64_t>, kClusterSlots / 64> words_{};
};

// What every thread of a cluster pool starts from, built at startup (main thread).
struct ClusterSetup {
  RedisUrl url;  // credentials for every node (the first seed's URL)
  std::vector<Endpoint> seeds;
  // The masters and the slot map read at startup; empty when no seed answered.
  std::vector<Endpoint> masters;
  std::vector<int16_t> slot_master;  // kClusterSlots entries, index into masters or -1
  SlotSet active;
};

// Resolves the seed URLs (blocking name resolution: main thread only).
bool ResolveClusterSeeds(const std::vector<std::string>& urls, ClusterSetup* out,
                         std::string* error);
// Reads CLUSTER SLOTS on a connection that passed the handshake (blocking, startup): fills the
// initial map. False with *error when the node is not in cluster mode.
bool ReadClusterSlots(BlockingLink& link, ClusterSetup* setup, std::string* error);

// CLUSTER SLOTS: [[start, end, [host, port, id, ...], replica...], ...]. Fills `masters` with
// (host, port) and `slot_master` (kClusterSlots entries) with indices into it, -1 for a slot no
// master serves. An empty host (or "?") means the node answering (fallback_host). False when the
// reply is not of that shape.
bool ParseClusterSlots(const redisReply& r, const std::string& fallback_host,
                       std::vector<std::pair<std::string, uint16_t>>* masters,
                       std::vector<int16_t>* slot_master);

// "host:port" (IPv6 hosts contain ':', the port follows the last one).
bool SplitHostPort(std::string_view text, std::string* host, uint16_t* port);

// What an error reply of a cluster node says about where a request goes.
struct Redirection {
  enum Kind {
    kNone,     // not a redirection nor a refusal: the caller's answer
    kMoved,    // "MOVED <slot> <host:port>": the slot lives there now
    kAsk,      // "ASK <slot> <host:port>": this one request goes there, after ASKING
    kRefused,  // TRYAGAIN or CLUSTERDOWN: not run; the same request may be sent again
    kBad,      // a MOVED or ASK that cannot be read
  };
  Kind kind = kNone;
  int slot = -1;
  std::string_view node;  // "host:port" of a MOVED or ASK
};
Redirection ReadRedirection(std::string_view error);

}  // namespace deferq::persist
