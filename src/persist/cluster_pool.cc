#include "persist/cluster_pool.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <utility>

#include "base/log.h"
#include "persist/keys.h"
#include "persist/scripts.h"

namespace deferq::persist {

namespace {

// Redirections followed for one request before it fails (a map that keeps moving).
constexpr int kMaxRedirects = 5;
// Resends of a request that was not applied (TRYAGAIN, CLUSTERDOWN, node down), waiting
// 25, 50, 100, 200, 400, 400, 400 ms: about 1.6 s, enough for a slot migration step or a
// failover that is already under way, short enough that a client is not kept hanging.
constexpr int kMaxRetries = 7;
constexpr int64_t kFirstRetryMs = 25;
constexpr int64_t kMaxRetryMs = 400;
constexpr int64_t kRefreshGapMs = 250;  // between two CLUSTER SLOTS of one thread
constexpr int64_t kPeriodicRefreshMs = 10000;
constexpr int64_t kSubscriberMoveMs = 3000;  // a subscriber down this long moves to another node
// Affinity bit of an ASKING + request pair. Each pair gets an affinity of its own (this bit and a
// sequence number): a fresh client queue on the connection, empty, so both go on the wire at once
// and together. Sharing one queue per client, a pair could be split by the per-client cap of
// requests on the wire (ASKING sent, its request held back), and another client's request sent
// between them would be the one ASKING applies to.
constexpr uint64_t kAskAffinity = uint64_t{1} << 63;

std::string NodeId(const Endpoint& e) { return e.host + ":" + std::to_string(e.port); }

}  // namespace

ClusterPool::ClusterPool(io::IoRing& io, std::string name, int connections, int timeout_ms,
                         PoolStats* stats, std::shared_ptr<ClusterSetup> setup,
                         std::shared_ptr<const Handshake> handshake, LinkFactory make_link)
    : io_(io),
      name_(std::move(name)),
      unavailable_("TRYAGAIN pool '" + name_ + "' unavailable"),
      connections_(std::max(1, connections)),
      timeout_ms_(timeout_ms),
      stats_(stats),
      setup_(std::move(setup)),
      handshake_(std::move(handshake)),
      make_link_(std::move(make_link)) {
  slot_node_.fill(-1);
  std::vector<int> master_node;
  for (const Endpoint& m : setup_->masters) master_node.push_back(NodeForAddr(m));
  for (size_t s = 0; s < setup_->slot_master.size() && s < slot_node_.size(); ++s) {
    const int m = setup_->slot_master[s];
    if (m >= 0) slot_node_[s] = static_cast<int16_t>(master_node[m]);
  }
  for (const Endpoint& seed : setup_->seeds) NodeForAddr(seed);
  refresh_wanted_ = setup_->slot_master.empty();
  periodic_refresh_ms_ = io_.now_ms() + kPeriodicRefreshMs;
}

ClusterPool::~ClusterPool() = default;

int ClusterPool::NodeForAddr(const Endpoint& addr) {
  const std::string id = NodeId(addr);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (NodeId(nodes_[i]->addr) == id) return static_cast<int>(i);
  }
  DQ_CHECK(nodes_.size() < 32000);  // slot_node_ holds int16_t
  auto node = std::make_unique<Node>();
  node->addr = addr;
  node->url = setup_->url;
  node->url.host = addr.host;
  node->url.port = addr.port;
  nodes_.push_back(std::move(node));
  return static_cast<int>(nodes_.size() - 1);
}

int ClusterPool::NodeFor(std::string_view host_port) {
  std::string host;
  uint16_t port = 0;
  Endpoint addr;
  if (!SplitHostPort(host_port, &host, &port) || !NumericEndpoint(host, port, &addr)) return -1;
  return NodeForAddr(addr);
}

std::unique_ptr<UpstreamLink> ClusterPool::MakeLink(const Endpoint& addr, const RedisUrl& url,
                                                    LinkOptions options) {
  if (make_link_) return make_link_(addr, url, std::move(options));
  auto c = std::make_unique<UpstreamConnection>(io_, url, addr.addr, addr.addr_len, name_,
                                                timeout_ms_, stats_, handshake_);
  if (options.on_message) {
    c->SetSubscriber(std::move(options.on_message), std::move(options.on_connect));
  } else {
    c->SetWaitReplicas(wait_replicas_, wait_timeout_ms_);
  }
  c->Connect();
  return c;
}

UpstreamLink& ClusterPool::Connection(int node, uint64_t affinity) {
  Node& n = *nodes_[node];
  if (n.conns.empty()) {
    for (int i = 0; i < connections_; ++i) n.conns.push_back(MakeLink(n.addr, n.url, {}));
  }
  UpstreamLink& pinned = *n.conns[(affinity & ~kAskAffinity) % n.conns.size()];
  if (pinned.accepting()) return pinned;
  for (auto& c : n.conns) {
    if (c->ready()) return *c;
  }
  return pinned;
}

bool ClusterPool::NodeUp(int node) const {
  for (const auto& c : nodes_[node]->conns) {
    if (c->ready()) return true;
  }
  return false;
}

void ClusterPool::Eval(Script script, std::span<const std::string_view> keys,
                       std::span<const std::string_view> args, uint64_t affinity,
                       UpstreamCallback cb) {
  DQ_CHECK(!keys.empty());
  std::vector<std::string_view> k(keys.begin(), keys.end());
  // The pool lease prefix (persist/keys.h kLeasePrefix) has no hash tag: its key "dq:own" is not
  // in the slot of "dq:". On a cluster the prefix becomes kClusterLeasePrefix, in that slot.
  if (k[0] == kLeasePrefix) k[0] = kClusterLeasePrefix;
  const int slot = KeySlot(k[0]);
  // The slots that hold queues, for the due-index reads. Not pump leases, rosters and due reads,
  // and not the metrics poller's reads: it also reads queues drained within the last hour, whose
  // slots may hold none.
  if (script != Script::kOwn && script != Script::kPumpers && script != Script::kDue &&
      script != Script::kQstats) {
    setup_->active.Set(slot);
  }
  const std::string registry = SlotRegistryKey(slot);
  const std::string due = SlotDueKey(slot);
  const std::string_view pool_keys[] = {registry, due};
  auto r = std::make_shared<Routed>();
  AppendFcall(&r->request, script, k, pool_keys, args);
  r->script = script;
  r->affinity = affinity;
  r->cb = std::move(cb);
  r->slot = slot;
  Route(std::move(r));
}

void ClusterPool::Command(std::span<const std::string_view> args, uint64_t affinity,
                          UpstreamCallback cb) {
  auto r = std::make_shared<Routed>();
  AppendArrayHeader(&r->request, args.size());
  for (std::string_view a : args) AppendBulk(&r->request, a);
  r->affinity = affinity;
  r->cb = std::move(cb);
  // Every command deferq sends names its key first (SET, EXISTS, SMEMBERS, ...).
  r->slot = args.size() > 1 ? KeySlot(args[1]) : -1;
  Route(std::move(r));
}

void ClusterPool::Route(std::shared_ptr<Routed> r) {
  int node = r->slot >= 0 ? slot_node_[r->slot] : -1;
  if (node < 0) {
    // Unknown slot (no map yet) or no key: any node that is up; a wrong guess is redirected.
    WantRefresh();
    node = 0;
    for (size_t i = 0; i < nodes_.size() && node == 0; ++i) {
      if (NodeUp(static_cast<int>(i))) node = static_cast<int>(i);
    }
  }
  SendTo(node, std::move(r), /*asking=*/false);
}

void ClusterPool::SendTo(int node, std::shared_ptr<Routed> r, bool asking) {
  UpstreamLink& conn = Connection(node, r->affinity);
  uint64_t affinity = r->affinity;
  if (asking) {
    affinity = kAskAffinity | (++ask_pairs_ & ~kAskAffinity);
    std::string ask;
    AppendCommand(&ask, {"ASKING"});
    conn.Send(std::move(ask), Script::kCount, affinity, [](const UpstreamResult&) {});
  }
  const Script script = r->script;
  std::string request = r->request;  // kept for a resend
  conn.Send(std::move(request), script, affinity,
            [this, r = std::move(r)](const UpstreamResult& res) { OnResult(r, res); });
}

void ClusterPool::OnResult(const std::shared_ptr<Routed>& r, const UpstreamResult& res) {
  const std::string err = FailureOf(res);
  if (err.empty() || stopping_) return r->cb(res);
  const Redirection where = ReadRedirection(err);
  if (where.kind == Redirection::kMoved || where.kind == Redirection::kAsk) {
    const int node = NodeFor(where.node);
    if (node < 0 || ++r->redirects > kMaxRedirects) return Retry(r, res);
    if (where.kind == Redirection::kMoved) {
      slot_node_[where.slot] = static_cast<int16_t>(node);
      WantRefresh();  // a moved slot rarely moves alone (resharding, failover)
    }
    return SendTo(node, r, /*asking=*/where.kind == Redirection::kAsk);
  }
  if (where.kind == Redirection::kBad) return Retry(r, res);
  if (res.reply == nullptr) {
    // Never sent (node down, failing over, library reloading): safe to resend. A TIMEOUT may
    // have been applied: the client decides (docs/operations.md, failures).
    WantRefresh();
    if (OutcomeOf(res) == UpstreamOutcome::kNotSent) return Retry(r, res);
    return r->cb(res);
  }
  // Redis refused it without running it (TRYAGAIN: keys of a migrating slot split between two
  // nodes; CLUSTERDOWN: the cluster cannot serve the slot right now).
  if (where.kind == Redirection::kRefused) {
    WantRefresh();
    return Retry(r, res);
  }
  r->cb(res);
}

void ClusterPool::Retry(std::shared_ptr<Routed> r, const UpstreamResult& res) {
  if (stopping_ || ++r->retries > kMaxRetries) {
    // A connection's failure names the pool already; Redis's refusal is given with it.
    const std::string error =
        res.reply == nullptr ? FailureOf(res) : unavailable_ + ": " + FailureOf(res);
    stats_->failures.fetch_add(1, std::memory_order_relaxed);
    return r->cb(UpstreamResult{nullptr, error});
  }
  r->retry_at = io_.now_ms() + std::min(kFirstRetryMs << (r->retries - 1), kMaxRetryMs);
  retries_.push_back(std::move(r));
}

void ClusterPool::MaybeRefresh() {
  const int64_t now = io_.now_ms();
  if (now >= periodic_refresh_ms_) {
    periodic_refresh_ms_ = now + kPeriodicRefreshMs;
    refresh_wanted_ = true;
  }
  if (!refresh_wanted_ || refresh_in_flight_ || stopping_ || now < next_refresh_ms_ ||
      nodes_.empty()) {
    return;
  }
  // A node whose connection is up answers at once; otherwise the next one in turn.
  int asked = static_cast<int>(refresh_rr_++ % nodes_.size());
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const size_t n = (refresh_rr_ + i) % nodes_.size();
    if (NodeUp(static_cast<int>(n))) {
      asked = static_cast<int>(n);
      break;
    }
  }
  refresh_wanted_ = false;
  refresh_in_flight_ = true;
  next_refresh_ms_ = now + kRefreshGapMs;
  std::string req;
  AppendCommand(&req, {"CLUSTER", "SLOTS"});
  Connection(asked, 0).Send(std::move(req), Script::kCount, 0,
                            [this, asked](const UpstreamResult& res) { OnSlots(asked, res); });
}

void ClusterPool::OnSlots(int asked, const UpstreamResult& res) {
  refresh_in_flight_ = false;
  std::vector<std::pair<std::string, uint16_t>> masters;
  std::vector<int16_t> slot_master;
  if (res.reply == nullptr ||
      !ParseClusterSlots(*res.reply, nodes_[asked]->addr.host, &masters, &slot_master)) {
    refresh_wanted_ = true;  // another node, after the gap
    return;
  }
  std::vector<int> node_of;
  for (const auto& [host, port] : masters)
    node_of.push_back(NodeFor(host + ":" + std::to_string(port)));
  std::vector<bool> in_map(nodes_.size(), false);
  for (int s = 0; s < kClusterSlots; ++s) {
    const int m = slot_master[s];
    const int node = m >= 0 ? node_of[m] : -1;
    slot_node_[s] = static_cast<int16_t>(node);
    if (node >= 0) in_map[node] = true;
  }
  // Nodes that serve no slot any more (a failed master, now a replica or gone): their
  // connections close; they are opened again if the node comes back into the map.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (in_map[i] || nodes_[i]->conns.empty()) continue;
    DQ_LOG(kInfo, "pool '%s': node %s serves no slots now; closing its connections", name_.c_str(),
           NodeId(nodes_[i]->addr).c_str());
    for (auto& c : nodes_[i]->conns) {
      c->Shutdown();
      retired_.push_back(std::move(c));
    }
    nodes_[i]->conns.clear();
  }
}

void ClusterPool::Subscribe(const std::string& channel,
                            std::function<void(std::string_view)> handler,
                            std::function<void()> on_subscribed) {
  channel_ = channel;
  on_message_ = std::move(handler);
  on_subscribed_ = std::move(on_subscribed);
  StartSubscriber();
}

void ClusterPool::StartSubscriber() {
  // Prefer a node that serves slots (a master); any node hears every PUBLISH of the cluster.
  std::vector<int> candidates;
  for (int n : slot_node_) {
    if (n >= 0 && std::find(candidates.begin(), candidates.end(), n) == candidates.end()) {
      candidates.push_back(n);
    }
  }
  if (candidates.empty()) {
    for (size_t i = 0; i < nodes_.size(); ++i) candidates.push_back(static_cast<int>(i));
  }
  const Node& n = *nodes_[candidates[subscriber_node_++ % candidates.size()]];
  LinkOptions options;
  options.on_message = [this](const redisReply* r) {
    // ["message", channel, payload]
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[2]->type == REDIS_REPLY_STRING) {
      on_message_(std::string_view(r->element[2]->str, r->element[2]->len));
    }
  };
  // Each time it is through the handshake (it is the current subscriber: a retired one was shut
  // down and connects no more).
  options.on_connect = [this] {
    if (!subscriber_) return;
    std::string req;
    AppendCommand(&req, {"SUBSCRIBE", channel_});
    subscriber_->Send(std::move(req), Script::kCount, 0, [this](const UpstreamResult& r) {
      if (r.reply != nullptr && on_subscribed_) on_subscribed_();
    });
  };
  subscriber_ = MakeLink(n.addr, n.url, std::move(options));
  subscriber_down_since_ = io_.now_ms();
}

void ClusterPool::Flush() {
  if (!retries_.empty()) {
    const int64_t now = io_.now_ms();
    std::vector<std::shared_ptr<Routed>> due;
    std::vector<std::shared_ptr<Routed>> later;
    for (auto& r : retries_) (r->retry_at <= now ? due : later).push_back(std::move(r));
    retries_.swap(later);
    for (auto& r : due) Route(std::move(r));
  }
  MaybeRefresh();
  for (auto& n : nodes_) {
    for (auto& c : n->conns) c->Flush();
  }
  if (subscriber_) subscriber_->Flush();
}

void ClusterPool::Tick() {
  for (auto& n : nodes_) {
    for (auto& c : n->conns) c->Tick();
  }
  std::erase_if(retired_, [](const auto& c) { return c->quiescent(); });
  if (subscriber_ && !stopping_) {
    subscriber_->Tick();
    const int64_t now = io_.now_ms();
    if (subscriber_->ready()) {
      subscriber_down_since_ = 0;
    } else if (subscriber_down_since_ == 0) {
      subscriber_down_since_ = now;
    } else if (now - subscriber_down_since_ > kSubscriberMoveMs) {
      DQ_LOG(kInfo, "pool '%s': the pub/sub connection moves to another node", name_.c_str());
      subscriber_->Shutdown();
      retired_.push_back(std::move(subscriber_));
      StartSubscriber();
    }
  }
}

void ClusterPool::Shutdown() {
  stopping_ = true;
  std::vector<std::shared_ptr<Routed>> waiting;
  waiting.swap(retries_);
  for (auto& r : waiting) r->cb(UpstreamResult{nullptr, unavailable_});
  for (auto& n : nodes_) {
    for (auto& c : n->conns) c->Shutdown();
  }
  if (subscriber_) subscriber_->Shutdown();
}

bool ClusterPool::quiescent() const {
  for (const auto& n : nodes_) {
    for (const auto& c : n->conns) {
      if (!c->quiescent()) return false;
    }
  }
  for (const auto& c : retired_) {
    if (!c->quiescent()) return false;
  }
  return !subscriber_ || subscriber_->quiescent();
}

}  // namespace deferq::persist
