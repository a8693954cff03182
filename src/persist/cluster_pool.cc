#include "persist/cluster_pool.h"

#include <hiredis/hiredis.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <tuple>
#include <utility>

#include "base/log.h"
#include "persist/keys.h"
#include "persist/reply_reader.h"
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
// Discovery of the slots that hold queues: slots whose registry key is checked per due-index
// read (every sweep_ms on the pump owner), so the whole space is covered every 32 reads.
constexpr int kDiscoverPerPoll = 512;
// The pool lease prefix (persist/keys.h kLeasePrefix) has no hash tag: its key "dq:own" is not in
// the slot of "dq:". On a cluster the prefix becomes kClusterLeasePrefix, in the declared slot.
// Reads of many slots' pool-wide keys in one call per master (the library's cluster_due,
// cluster_registry and cluster_slots functions: flags no-writes, allow-cross-slot-keys, called
// with no keys; Redis >= 7.0 lets them read keys of any slot the node serves). A slot the node
// does not serve (it moved) is reported back and read with a plain command, which follows the
// redirection.
// Affinity bit of an ASKING + request pair. Each pair gets an affinity of its own (this bit and a
// sequence number): a fresh client queue on the connection, empty, so both go on the wire at once
// and together. Sharing one queue per client, a pair could be split by the per-client cap of
// requests on the wire (ASKING sent, its request held back), and another client's request sent
// between them would be the one ASKING applies to.
constexpr uint64_t kAskAffinity = uint64_t{1} << 63;

std::string NodeId(const Endpoint& e) { return e.host + ":" + std::to_string(e.port); }

// "host:port" (IPv6 hosts contain ':', the port follows the last one).
bool SplitHostPort(std::string_view text, std::string* host, uint16_t* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return false;
  unsigned p = 0;
  auto r = std::from_chars(text.data() + colon + 1, text.data() + text.size(), p);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || p == 0 || p > 65535) {
    return false;
  }
  *host = std::string(text.substr(0, colon));
  *port = static_cast<uint16_t>(p);
  return true;
}

// CLUSTER SLOTS: [[start, end, [host, port, id, ...], replica...], ...]. Fills `masters` with
// "host:port" and `slot_master` (kClusterSlots entries) with indices into it. An empty host
// means the node answering (fallback_host).
bool ParseClusterSlots(const redisReply& r, const std::string& fallback_host,
                       std::vector<std::pair<std::string, uint16_t>>* masters,
                       std::vector<int16_t>* slot_master) {
  if (r.type != REDIS_REPLY_ARRAY) return false;
  slot_master->assign(kClusterSlots, -1);
  for (size_t i = 0; i < r.elements; ++i) {
    const redisReply* e = r.element[i];
    int64_t start = 0, end = 0, port = 0;
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !ReplyInteger(e->element[0], &start) ||
        !ReplyInteger(e->element[1], &end) || e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 || e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
        !ReplyInteger(e->element[2]->element[1], &port)) {
      return false;
    }
    if (start < 0 || end >= kClusterSlots || start > end || port <= 0 || port > 65535) {
      return false;
    }
    std::string host(e->element[2]->element[0]->str, e->element[2]->element[0]->len);
    if (host.empty() || host == "?") host = fallback_host;
    std::pair<std::string, uint16_t> m{host, static_cast<uint16_t>(port)};
    auto it = std::find(masters->begin(), masters->end(), m);
    const auto index = static_cast<int16_t>(it - masters->begin());
    if (it == masters->end()) masters->push_back(std::move(m));
    for (int64_t s = start; s <= end; ++s) (*slot_master)[s] = index;
  }
  return true;
}

std::string_view ErrorText(const UpstreamResult& res) {
  if (res.reply == nullptr) return res.error;
  if (res.reply->type == REDIS_REPLY_ERROR) return {res.reply->str, res.reply->len};
  return {};
}

}  // namespace

bool ResolveClusterSeeds(const std::vector<std::string>& urls, ClusterSetup* out,
                         std::string* error) {
  for (size_t i = 0; i < urls.size(); ++i) {
    RedisUrl url;
    if (!ParseRedisUrl(urls[i], &url, error)) return false;
    if (url.db != 0) {
      *error = "cluster[" + std::to_string(i) + "]: a Redis Cluster has only database 0";
      return false;
    }
    if (i == 0) out->url = url;
    Endpoint seed;
    if (!ResolveEndpoint(url.host, url.port, &seed, error)) {
      *error = "cannot resolve " + url.host + ": " + *error;
      return false;
    }
    out->seeds.push_back(std::move(seed));
  }
  return true;
}

bool ReadClusterSlots(redisContext* c, ClusterSetup* setup, std::string* error) {
  auto* reply = static_cast<redisReply*>(redisCommand(c, "CLUSTER SLOTS"));
  if (reply == nullptr) return true;  // it stopped answering: the threads ask again
  if (reply->type == REDIS_REPLY_ERROR) {
    *error = "it is not a Redis Cluster node (CLUSTER SLOTS answered " +
             std::string(reply->str, reply->len) + "); use addr for a standalone Redis";
    freeReplyObject(reply);
    return false;
  }
  std::vector<std::pair<std::string, uint16_t>> masters;
  std::vector<int16_t> slot_master;
  const bool ok = ParseClusterSlots(*reply, setup->url.host, &masters, &slot_master);
  freeReplyObject(reply);
  if (!ok) return true;
  for (const auto& [host, port] : masters) {
    Endpoint a;
    if (!NumericEndpoint(host, port, &a)) {
      *error = "CLUSTER SLOTS names node " + host + ", which is not an IP address";
      return false;
    }
    setup->masters.push_back(std::move(a));
  }
  setup->slot_master = std::move(slot_master);
  return true;
}

struct ClusterPool::Node {
  Endpoint addr;
  RedisUrl url;
  std::vector<std::unique_ptr<UpstreamConnection>> conns;
};

struct ClusterPool::Routed {
  std::string request;
  Script script = Script::kCount;
  uint64_t affinity = 0;
  UpstreamCallback cb;
  int slot = -1;  // -1: any node
  int redirects = 0;
  int retries = 0;
  int64_t retry_at = 0;
};

struct ClusterPool::Gather {
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

ClusterPool::ClusterPool(io::IoRing& io, std::string name, int connections, int timeout_ms,
                         PoolStats* stats, std::shared_ptr<ClusterSetup> setup,
                         std::shared_ptr<const Handshake> handshake)
    : io_(io),
      name_(std::move(name)),
      unavailable_("TRYAGAIN pool '" + name_ + "' unavailable"),
      connections_(std::max(1, connections)),
      timeout_ms_(timeout_ms),
      stats_(stats),
      setup_(std::move(setup)),
      handshake_(std::move(handshake)) {
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

UpstreamConnection& ClusterPool::Connection(int node, uint64_t affinity) {
  Node& n = *nodes_[node];
  if (n.conns.empty()) {
    for (int i = 0; i < connections_; ++i) {
      n.conns.push_back(std::make_unique<UpstreamConnection>(
          io_, n.url, n.addr.addr, n.addr.addr_len, name_, timeout_ms_, stats_, handshake_));
      n.conns.back()->SetWaitReplicas(wait_replicas_, wait_timeout_ms_);
      n.conns.back()->Connect();
    }
  }
  UpstreamConnection& pinned = *n.conns[(affinity & ~kAskAffinity) % n.conns.size()];
  if (pinned.accepting()) return pinned;
  for (auto& c : n.conns) {
    if (c->state() == UpstreamConnection::State::kReady) return *c;
  }
  return pinned;
}

void ClusterPool::Eval(Script script, std::span<const std::string_view> keys,
                       std::span<const std::string_view> args, uint64_t affinity,
                       UpstreamCallback cb) {
  DQ_CHECK(!keys.empty());
  std::vector<std::string_view> k(keys.begin(), keys.end());
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
      for (const auto& c : nodes_[i]->conns) {
        if (c->state() == UpstreamConnection::State::kReady) node = static_cast<int>(i);
      }
    }
  }
  SendTo(node, std::move(r), /*asking=*/false);
}

void ClusterPool::SendTo(int node, std::shared_ptr<Routed> r, bool asking) {
  UpstreamConnection& conn = Connection(node, r->affinity);
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
  const std::string_view err = ErrorText(res);
  if (err.empty() || stopping_) return r->cb(res);
  const bool moved = err.starts_with("MOVED ");
  if (moved || err.starts_with("ASK ")) {
    // "MOVED <slot> <host:port>": the slot lives there now. "ASK ...": this one request goes
    // there, preceded by ASKING, while the slot migrates.
    const std::string_view rest = err.substr(moved ? 6 : 4);
    const size_t space = rest.find(' ');
    int slot = -1;
    const int node = space == std::string_view::npos ? -1 : NodeFor(rest.substr(space + 1));
    if (space != std::string_view::npos) std::from_chars(rest.data(), rest.data() + space, slot);
    if (node < 0 || slot < 0 || slot >= kClusterSlots || ++r->redirects > kMaxRedirects) {
      return Retry(r, err);
    }
    if (moved) {
      slot_node_[slot] = static_cast<int16_t>(node);
      WantRefresh();  // a moved slot rarely moves alone (resharding, failover)
    }
    return SendTo(node, r, /*asking=*/!moved);
  }
  if (res.reply == nullptr) {
    // Never sent (node down, failing over, library reloading): safe to resend. A TIMEOUT may
    // have been applied: the client decides (docs/operations.md, failures).
    WantRefresh();
    if (err.starts_with("TRYAGAIN")) return Retry(r, err);
    return r->cb(res);
  }
  // Redis refused it without running it: keys of a migrating slot split between two nodes, or
  // the cluster cannot serve the slot right now.
  if (err.starts_with("TRYAGAIN") || err.starts_with("CLUSTERDOWN")) {
    WantRefresh();
    return Retry(r, err);
  }
  r->cb(res);
}

void ClusterPool::Retry(std::shared_ptr<Routed> r, std::string_view why) {
  if (stopping_ || ++r->retries > kMaxRetries) {
    const std::string error = why.starts_with("TRYAGAIN pool ")
                                  ? std::string(why)
                                  : unavailable_ + ": " + std::string(why);
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
    bool up = false;
    for (const auto& c : nodes_[n]->conns) up |= c->state() == UpstreamConnection::State::kReady;
    if (up) {
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

void ClusterPool::ReadRegistry(uint64_t, RegistryCallback cb, bool whole) {
  auto g = std::make_shared<Gather>();
  g->kind = Gather::kMembers;
  g->whole = whole;
  g->args = {"SMEMBERS", ""};
  g->registry_cb = std::move(cb);
  std::vector<int> slots(kClusterSlots);
  for (int s = 0; s < kClusterSlots; ++s) slots[s] = s;
  GatherSlots(std::move(g), slots);
}

void ClusterPool::ReadDue(int64_t max_ms, size_t limit, uint64_t, DueCallback cb) {
  auto g = std::make_shared<Gather>();
  g->kind = Gather::kDue;
  g->args = {"ZRANGEBYSCORE", "", "-inf", max_ms < 0 ? "+inf" : std::to_string(max_ms),
             "WITHSCORES"};
  if (limit > 0) {
    g->limit = limit;  // the merged answer keeps the earliest `limit`
    g->args.insert(g->args.end(), {"LIMIT", "0", std::to_string(limit)});
  }
  g->due_cb = std::move(cb);
  std::vector<int> slots;
  for (int s = 0; s < kClusterSlots; ++s) {
    if (setup_->active.Test(s)) slots.push_back(s);
  }
  Discover();
  GatherSlots(std::move(g), slots);
}

void ClusterPool::GatherSlots(std::shared_ptr<Gather> g, const std::vector<int>& slots) {
  auto finish = [this](Gather& g) {
    if (g.kind == Gather::kDue) {
      DueRead read;
      // Earliest first across the nodes (then by tag, so the order does not depend on theirs).
      std::sort(g.due.begin(), g.due.end(), [](const auto& a, const auto& b) {
        return std::tie(a.second, a.first) < std::tie(b.second, b.first);
      });
      if (g.due.size() > g.limit) g.due.resize(g.limit);
      read.entries = std::move(g.due);
      return g.due_cb(read);
    }
    RegistryRead read;
    if (!g.error.empty() && g.whole) {
      // QUEUES must not answer a partial list as if it were whole.
      read.error = g.error.starts_with("TRYAGAIN pool ") || g.error.starts_with("TIMEOUT pool ")
                       ? g.error
                       : unavailable_ + ": " + g.error;
    } else {
      // Everything in one page (cursor "0"): a page is a bound on reply size that the per-slot
      // replies keep anyway.
      read.tags = std::move(g.members);
    }
    g.registry_cb(read);
  };
  // One guard count until everything is sent: a callback that runs at once cannot finish early.
  g->remaining = 1;
  {
    const bool due = g->kind == Gather::kDue;
    const std::string count = g->limit == SIZE_MAX ? "-1" : std::to_string(g->limit);
    std::vector<std::string_view> fixed;
    if (due) fixed = {g->args[2], g->args[3], count};
    std::vector<std::vector<int>> by_node = ByNode(slots);
    for (const auto& part : by_node) g->remaining += part.empty() ? 0 : 1;
    CallPerNode(
        due ? Script::kClusterDue : Script::kClusterRegistry, fixed, std::move(by_node),
        [this, g, finish](const std::vector<int>& part, const UpstreamResult& res) {
          std::vector<int> again;  // read one by one: the node did not serve them, or failed
          const redisReply* rep = res.reply;
          if (rep == nullptr || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
              rep->element[0]->type != REDIS_REPLY_ARRAY ||
              rep->element[1]->type != REDIS_REPLY_ARRAY) {
            again = part;
          } else {
            const redisReply* entries = rep->element[0];
            if (g->kind == Gather::kDue) AppendDueEntries(entries, &g->due);
            for (size_t i = 0; g->kind != Gather::kDue && i < entries->elements; ++i) {
              if (entries->element[i]->type != REDIS_REPLY_STRING) continue;
              g->members.emplace_back(entries->element[i]->str, entries->element[i]->len);
            }
            for (size_t i = 0; i < rep->element[1]->elements; ++i) {
              int64_t pos = 0;
              if (ReplyInteger(rep->element[1]->element[i], &pos) && pos >= 1 &&
                  static_cast<size_t>(pos) <= part.size()) {
                again.push_back(part[pos - 1]);
              }
            }
          }
          if (!again.empty()) {
            WantRefresh();
            ReadSlots(g, again, finish);
          }
          if (--g->remaining == 0) finish(*g);
        });
  }
  if (--g->remaining == 0) finish(*g);
}

void ClusterPool::ReadSlots(const std::shared_ptr<Gather>& g, const std::vector<int>& slots,
                            const std::function<void(Gather&)>& finish) {
  g->remaining += slots.size();
  for (int slot : slots) {
    auto r = std::make_shared<Routed>();
    std::vector<std::string_view> a(g->args.begin(), g->args.end());
    const std::string key = g->kind == Gather::kDue ? SlotDueKey(slot) : SlotRegistryKey(slot);
    a[1] = key;
    AppendArrayHeader(&r->request, a.size());
    for (std::string_view x : a) AppendBulk(&r->request, x);
    r->slot = slot;
    r->cb = [g, finish](const UpstreamResult& res) {
      const std::string_view err = ErrorText(res);
      if (!err.empty()) {
        if (g->error.empty()) g->error = std::string(err);
      } else if (res.reply->type == REDIS_REPLY_ARRAY) {
        const redisReply* rep = res.reply;
        if (g->kind == Gather::kDue) {
          AppendDueEntries(rep, &g->due);
        } else {
          for (size_t i = 0; i < rep->elements; ++i) {
            if (rep->element[i]->type != REDIS_REPLY_STRING) continue;
            g->members.emplace_back(rep->element[i]->str, rep->element[i]->len);
          }
        }
      }
      if (--g->remaining == 0) finish(*g);
    };
    Route(std::move(r));
  }
}

void ClusterPool::Discover() {
  std::vector<int> slots(kDiscoverPerPoll);
  for (int i = 0; i < kDiscoverPerPoll; ++i) slots[i] = (discover_cursor_ + i) % kClusterSlots;
  discover_cursor_ = (discover_cursor_ + kDiscoverPerPoll) % kClusterSlots;
  CallPerNode(
      Script::kClusterSlots, {}, ByNode(slots),
      [setup = setup_](const std::vector<int>& part, const UpstreamResult& res) {
        // Slots the node did not serve are checked again by the next pass.
        const redisReply* rep = res.reply;
        if (rep == nullptr || rep->type != REDIS_REPLY_ARRAY || rep->elements != part.size()) {
          return;
        }
        for (size_t i = 0; i < part.size(); ++i) {
          int64_t v = -1;
          ReplyInteger(rep->element[i], &v);
          if (v == 1) setup->active.Set(part[i]);
          if (v == 0) setup->active.Clear(part[i]);
        }
      });
}

std::vector<std::vector<int>> ClusterPool::ByNode(const std::vector<int>& slots) const {
  std::vector<std::vector<int>> by_node(nodes_.size());
  for (int slot : slots) {
    // A slot of no known node goes with node 0's: reported back as not served, read alone.
    const int node = slot_node_[slot] >= 0 ? slot_node_[slot] : 0;
    by_node[node].push_back(slot);
  }
  return by_node;
}

void ClusterPool::CallPerNode(
    Script script, std::span<const std::string_view> fixed, std::vector<std::vector<int>> by_node,
    std::function<void(const std::vector<int>&, const UpstreamResult&)> cb) {
  for (size_t node = 0; node < by_node.size(); ++node) {
    if (by_node[node].empty()) continue;
    auto r = std::make_shared<Routed>();
    std::vector<std::string> tags;
    for (int slot : by_node[node]) tags.push_back(SlotTag(slot));
    std::vector<std::string_view> args(fixed.begin(), fixed.end());
    args.insert(args.end(), tags.begin(), tags.end());
    AppendFcall(&r->request, script, {}, {}, args);
    r->script = script;
    r->cb = [part = std::move(by_node[node]), cb](const UpstreamResult& res) { cb(part, res); };
    SendTo(static_cast<int>(node), std::move(r), /*asking=*/false);
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
  subscriber_ = std::make_unique<UpstreamConnection>(io_, n.url, n.addr.addr, n.addr.addr_len,
                                                     name_, timeout_ms_, stats_, handshake_);
  UpstreamConnection* sub = subscriber_.get();
  sub->SetSubscriber(
      [this](const redisReply* r) {
        // ["message", channel, payload]
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            r->element[2]->type == REDIS_REPLY_STRING) {
          on_message_(std::string_view(r->element[2]->str, r->element[2]->len));
        }
      },
      [this, sub, channel = channel_] {
        std::string req;
        AppendCommand(&req, {"SUBSCRIBE", channel});
        sub->Send(std::move(req), Script::kCount, 0, [this](const UpstreamResult& r) {
          if (r.reply != nullptr && on_subscribed_) on_subscribed_();
        });
      });
  sub->Connect();
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
    if (subscriber_->state() == UpstreamConnection::State::kReady) {
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
