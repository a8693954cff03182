// ClusterPool's pool-wide reads (persist/cluster_pool.h): the registry and the due index read
// across the slots, and the discovery of the slots that hold queues. Many slots' keys are read in
// one call per master (the library's cluster_due, cluster_registry and cluster_slots functions:
// flags no-writes, allow-cross-slot-keys, called with no keys; Redis >= 7.0 lets them read keys
// of any slot the node serves). A slot the node does not serve (it moved) is reported back and
// read with a plain command, which follows the redirection.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "persist/cluster_pool.h"
#include "persist/reply_reader.h"
#include "persist/scripts.h"

namespace deferq::persist {

namespace {

// Discovery of the slots that hold queues: slots whose registry key is checked per due-index
// read (every sweep_ms on the pump owner), so the whole space is covered every 32 reads.
constexpr int kDiscoverPerPoll = 512;

}  // namespace

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
  auto finish = [](Gather& g) {
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
      read.error = g.error;
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
    r->cb = [this, g, finish](const UpstreamResult& res) {
      const std::string err = FailureOf(res);
      if (!err.empty()) {
        // A connection's failure names the pool already; Redis's error is given with it.
        if (g->error.empty()) g->error = res.reply == nullptr ? err : unavailable_ + ": " + err;
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

}  // namespace deferq::persist
