#include "persist/cluster_map.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>

#include "persist/reply_reader.h"

namespace deferq::persist {

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

Redirection ReadRedirection(std::string_view error) {
  Redirection r;
  const bool moved = error.starts_with("MOVED ");
  if (moved || error.starts_with("ASK ")) {
    r.kind = Redirection::kBad;
    const std::string_view rest = error.substr(moved ? 6 : 4);
    const size_t space = rest.find(' ');
    if (space == std::string_view::npos) return r;
    int slot = -1;
    auto parsed = std::from_chars(rest.data(), rest.data() + space, slot);
    if (parsed.ec != std::errc() || parsed.ptr != rest.data() + space || slot < 0 ||
        slot >= kClusterSlots || space + 1 >= rest.size()) {
      return r;
    }
    r.kind = moved ? Redirection::kMoved : Redirection::kAsk;
    r.slot = slot;
    r.node = rest.substr(space + 1);
    return r;
  }
  if (error.starts_with("TRYAGAIN") || error.starts_with("CLUSTERDOWN")) {
    r.kind = Redirection::kRefused;
  }
  return r;
}

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

bool ReadClusterSlots(BlockingLink& link, ClusterSetup* setup, std::string* error) {
  std::string why;
  OwnedReply reply = link.Command({"CLUSTER", "SLOTS"}, &why);
  if (reply == nullptr) return true;  // it stopped answering: the threads ask again
  if (reply->type == REDIS_REPLY_ERROR) {
    *error = "it is not a Redis Cluster node (CLUSTER SLOTS answered " +
             std::string(reply->str, reply->len) + "); use addr for a standalone Redis";
    return false;
  }
  std::vector<std::pair<std::string, uint16_t>> masters;
  std::vector<int16_t> slot_master;
  const bool ok = ParseClusterSlots(*reply, setup->url.host, &masters, &slot_master);
  reply.reset();
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

}  // namespace deferq::persist
