// A Redis Cluster pool as one loop thread sees it (docs/operations.md and docs/configuration.md:
// `cluster = ["redis://h:p", ...]`). PoolClient (persist/pool.h) hands every request of a cluster
// pool to this class; the queue room sees the same interface as for a standalone pool.
//
// API:
// - Eval/Command route each request to the master serving the slot of its key (the queue prefix's
//   hash tag for FCALLs, the first argument for other commands), over `connections_per_thread`
//   pipelined UpstreamConnections per node, created when a node is first used. Each passes the
//   same handshake as a standalone connection (Redis >= 7.0, noeviction, the functions library).
// - Redirections never reach clients: MOVED updates the slot map (and asks for a fresh one) and
//   resends; ASK resends with ASKING to the importing node. TRYAGAIN and CLUSTERDOWN replies, and
//   requests a node connection could not send (down, failing over, library being reloaded), are
//   retried with a bounded backoff (about 1.6 s in all); then the caller gets
//   "TRYAGAIN pool '<name>' unavailable: <last reason>". A request that was sent and not answered
//   (TIMEOUT) is never resent: it may have been applied.
// - The slot map comes from CLUSTER SLOTS: read at startup (ReadClusterSlots), then again on a
//   redirection or a node failure (at most every 250 ms) and every 10 s.
// - Pool-wide keys: the registry and due index are per slot (persist/cluster_slots.h), passed to
//   the scripts as KEYS[2..3] in the queue's own slot. ReadRegistry and ReadDue (what
//   PoolClient's reads of the same names call, persist/pool_indexes.h) read them across the
//   slots and merge the answers: one call per master of a keyless library function
//   (cluster_due / cluster_registry.lua, flags no-writes, allow-cross-slot-keys) reads the keys
//   of many of its slots, and a slot the master turns out not to serve (it moved) is read
//   alone with a plain command, which follows the redirection. The registry is read over every slot
//   (QUEUES, a new pump owner's first pass), the due index over the slots known to hold queues:
//   those this process sent scripts to plus what a discovery pass finds (the registry keys of 512
//   slots per due-index read, so every slot every 3.2 s at the 100 ms sweep).
// - Subscribe: a plain SUBSCRIBE on one node; Redis Cluster broadcasts PUBLISH to every node, so
//   any node hears the scripts' announcements. A subscriber whose node stays down moves on to
//   another node.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/redis_url.h"
#include "persist/cluster_map.h"
#include "persist/cluster_slots.h"
#include "persist/endpoint.h"
#include "persist/handshake.h"
#include "persist/pool_indexes.h"
#include "persist/scripts.h"
#include "persist/upstream_backend.h"
#include "persist/upstream_connection.h"
#include "persist/upstream_link.h"

struct redisReply;

namespace deferq::persist {

// How ClusterPool opens a connection to a node (the real one: an UpstreamConnection on the
// loop's ring, connecting at once; unit tests pass fake links). A subscriber link has
// `on_message` (a message that came) and `on_connect` (each time it is through the handshake).
struct LinkOptions {
  std::function<void(const redisReply*)> on_message;
  std::function<void()> on_connect;
};
using LinkFactory = std::function<std::unique_ptr<UpstreamLink>(const Endpoint& addr,
                                                                const RedisUrl& url, LinkOptions)>;

class ClusterPool final : public UpstreamBackend {
 public:
  ClusterPool(io::IoRing& io, std::string name, int connections, int timeout_ms, PoolStats* stats,
              std::shared_ptr<ClusterSetup> setup, std::shared_ptr<const Handshake> handshake,
              LinkFactory make_link = {});
  ~ClusterPool() override;
  ClusterPool(const ClusterPool&) = delete;
  ClusterPool& operator=(const ClusterPool&) = delete;

  // The pool's wait_replicas (UpstreamConnection::SetWaitReplicas) for every node connection:
  // each master waits for its own replicas. Before the first request.
  void SetWaitReplicas(int replicas, int timeout_ms) {
    wait_replicas_ = replicas;
    wait_timeout_ms_ = timeout_ms;
  }

  void Eval(Script script, std::span<const std::string_view> keys,
            std::span<const std::string_view> args, uint64_t affinity,
            UpstreamCallback cb) override;
  void Command(std::span<const std::string_view> args, uint64_t affinity,
               UpstreamCallback cb) override;
  // The pool-wide indexes across the slots (persist/pool_indexes.h, PoolClient::ReadRegistry and
  // ReadDue): the registry over every slot, the due index over the slots known to hold queues.
  // `whole`: a slot that could not be read fails the registry read (else it is left out).
  void ReadRegistry(uint64_t affinity, RegistryCallback cb, bool whole) override;
  // Everything in one page (cursor "0"): the per-slot replies are bounded anyway.
  void ScanRegistry(const std::string&, size_t, RegistryCallback cb) override {
    ReadRegistry(0, std::move(cb), /*whole=*/false);
  }
  void ReadDue(int64_t max_ms, size_t limit, uint64_t affinity, DueCallback cb) override;
  void Subscribe(const std::string& channel, std::function<void(std::string_view)> handler,
                 std::function<void()> on_subscribed) override;

  void Flush() override;
  void Tick() override;
  void Shutdown() override;
  bool quiescent() const override;

 private:
  struct Node {
    Endpoint addr;
    RedisUrl url;
    std::vector<std::unique_ptr<UpstreamLink>> conns;
  };

  struct Routed {
    std::string request;
    Script script = Script::kCount;
    uint64_t affinity = 0;
    UpstreamCallback cb;
    int slot = -1;  // -1: any node
    int redirects = 0;
    int retries = 0;
    int64_t retry_at = 0;
  };

  struct Gather {
    enum Kind { kMembers, kDue };
    Kind kind = kMembers;
    bool whole = true;              // kMembers: a slot not read fails the read
    std::vector<std::string> args;  // the command a slot is read with alone; args[1]: its key
    size_t remaining = 0;
    size_t limit = SIZE_MAX;
    std::vector<std::string> members;
    std::vector<std::pair<std::string, int64_t>> due;  // (tag, due ms)
    std::string error;
    RegistryCallback registry_cb;
    DueCallback due_cb;
  };

  void Route(std::shared_ptr<Routed> r);
  void SendTo(int node, std::shared_ptr<Routed> r, bool asking);
  void OnResult(const std::shared_ptr<Routed>& r, const UpstreamResult& res);
  void Retry(std::shared_ptr<Routed> r, const UpstreamResult& res);
  int NodeFor(std::string_view host_port);
  int NodeForAddr(const Endpoint& addr);  // finds or adds the node
  UpstreamLink& Connection(int node, uint64_t affinity);
  bool NodeUp(int node) const;  // one of its connections is ready
  std::unique_ptr<UpstreamLink> MakeLink(const Endpoint& addr, const RedisUrl& url,
                                         LinkOptions options);
  void WantRefresh() { refresh_wanted_ = true; }
  void MaybeRefresh();
  void OnSlots(int asked, const UpstreamResult& res);
  // Pool-wide keys (see the header comment).
  void GatherSlots(std::shared_ptr<Gather> g, const std::vector<int>& slots);
  // One plain command per slot (follows redirections).
  void ReadSlots(const std::shared_ptr<Gather>& g, const std::vector<int>& slots,
                 const std::function<void(Gather&)>& finish);
  // The slots grouped by the node that serves them (index: node).
  std::vector<std::vector<int>> ByNode(const std::vector<int>& slots) const;
  // One call of `script` (a keyless cluster_* function) per node for its slots: ARGV = fixed,
  // then the slots' tags; cb gets each call's slots and reply.
  void CallPerNode(Script script, std::span<const std::string_view> fixed,
                   std::vector<std::vector<int>> by_node,
                   std::function<void(const std::vector<int>&, const UpstreamResult&)> cb);
  void Discover();
  void StartSubscriber();

  io::IoRing& io_;
  std::string name_;
  std::string unavailable_;  // "TRYAGAIN pool '<name>' unavailable"
  int connections_;
  int timeout_ms_;
  PoolStats* stats_;
  std::shared_ptr<ClusterSetup> setup_;
  std::shared_ptr<const Handshake> handshake_;
  LinkFactory make_link_;  // empty: UpstreamConnections

  std::vector<std::unique_ptr<Node>> nodes_;  // never shrinks: slot_node_ holds indices
  std::array<int16_t, kClusterSlots> slot_node_;
  std::vector<std::shared_ptr<Routed>> retries_;
  // Connections of nodes that left the map, closed, destroyed once their operations are done.
  std::vector<std::unique_ptr<UpstreamLink>> retired_;
  bool refresh_wanted_ = true;
  bool refresh_in_flight_ = false;
  int64_t next_refresh_ms_ = 0;
  int64_t periodic_refresh_ms_ = 0;
  size_t refresh_rr_ = 0;
  int discover_cursor_ = 0;
  int wait_replicas_ = 0;
  int wait_timeout_ms_ = 1000;
  bool stopping_ = false;
  uint64_t ask_pairs_ = 0;  // ASKING + request pairs sent: each its own affinity (SendTo)

  std::string channel_;
  std::function<void(std::string_view)> on_message_;
  std::function<void()> on_subscribed_;
  std::unique_ptr<UpstreamLink> subscriber_;
  size_t subscriber_node_ = 0;
  int64_t subscriber_down_since_ = 0;
};

}  // namespace deferq::persist
