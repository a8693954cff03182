#include "persist/pool.h"

#include <hiredis/hiredis.h>

#include "persist/blocking_link.h"
#include "persist/cluster_pool.h"
#include "persist/reply_reader.h"
#include "persist/sentinel.h"
#include "persist/standalone_backend.h"
#include "persist/upstream_tls.h"

namespace deferq::persist {

bool ResolvePools(const Config& config, std::vector<ResolvedPool>* out, std::string* error) {
  for (const PoolConfig& pc : config.pools) {
    ResolvedPool rp;
    rp.name = pc.name;
    rp.connections = pc.connections_per_thread;
    rp.timeout_ms = pc.timeout_ms;
    rp.wait_replicas = pc.wait_replicas;
    rp.wait_timeout_ms = pc.wait_timeout_ms;
    if (!pc.sentinels.empty()) {
      if (!ResolveSentinels(pc, &rp.sentinel, error)) return false;
      rp.url.password = pc.master_password;  // the address comes from the Sentinels
      rp.url.tls = pc.tls;
      out->push_back(std::move(rp));
      continue;
    }
    if (!pc.cluster.empty()) {
      rp.cluster = std::make_shared<ClusterSetup>();
      if (!ResolveClusterSeeds(pc.cluster, rp.cluster.get(), error)) {
        *error = "pool '" + pc.name + "': " + *error;
        return false;
      }
    }
    // A cluster pool's url and addr are its first seed's: startup checks and INFO name it.
    if (!ParseRedisUrl(pc.cluster.empty() ? pc.addr : pc.cluster[0], &rp.url, error)) {
      *error = "pool '" + pc.name + "': " + *error;
      return false;
    }
    Endpoint ep;
    if (!ResolveEndpoint(rp.url.host, rp.url.port, &ep, error)) {
      *error = "pool '" + pc.name + "': cannot resolve " + rp.url.host + ": " + *error;
      return false;
    }
    rp.addr = ep.addr;
    rp.addr_len = ep.addr_len;
    out->push_back(std::move(rp));
  }
  return true;
}

bool CheckPool(const ResolvedPool& pool, std::string* warning, std::string* error) {
  RedisUrl url = pool.url;
  if (pool.sentinel != nullptr) {
    Endpoint master;
    std::string why;
    if (!FindMasterBlocking(*pool.sentinel, &master, &why)) {
      *warning = "pool '" + pool.name + "': no Sentinel named master '" +
                 pool.sentinel->master_name() + "' (" + why +
                 "); commands on it answer TRYAGAIN until one does";
      return true;
    }
    url.host = master.host;
    url.port = master.port;
  }
  const std::string where =
      "pool '" + pool.name + "' (" + url.host + ":" + std::to_string(url.port) + ")";
  Endpoint ep;
  std::string why;
  BlockingLink link;
  if (!NumericEndpoint(url.host, url.port, &ep) &&
      !ResolveEndpoint(url.host, url.port, &ep, &why)) {
    *warning = where + " cannot be resolved (" + why +
               "); commands on it answer TRYAGAIN until it comes up and passes its checks";
    return true;
  }
  // The certificate must carry the host connected to, as on every pool connection: the
  // configured one, or the address a Sentinel names (pool.url.host is empty then).
  if (!link.Connect(ep, 1000, url.tls ? UpstreamTls() : nullptr, url.host, &why)) {
    *warning = where + " is unreachable (" + why +
               "); commands on it answer TRYAGAIN until it comes up and passes its checks";
    return true;
  }
  // The same steps as every connection's handshake, one at a time (startup can afford the round
  // trips): the first refusal stops before anything is written.
  const Handshake steps =
      pool.sentinel != nullptr ? BuildMasterHandshake(url) : BuildHandshake(url);
  bool library_present = false;
  for (const SetupStep& step : steps) {
    if (step.loads_library && library_present) continue;
    OwnedReply reply = link.Call(step.request, &why);
    if (reply == nullptr) {
      *warning = where + " stopped answering during its checks (" + why +
                 "); they run again on every connection";
      break;
    }
    SetupVerdict v = step.check(*reply);
    library_present = library_present || v.library_present;
    if (IsRoleRefusal(v)) {
      // A failover in progress, not a misconfiguration: the connections follow the Sentinels.
      *warning += (warning->empty() ? where + ": " : "; ") + v.text;
      break;
    }
    if (v.kind == SetupVerdict::kRefuse) {
      *error = where + ": " + v.text;
      return false;
    }
    if (v.kind == SetupVerdict::kWarn) {
      *warning += (warning->empty() ? where + ": " : "; ") + v.text;
    }
  }
  // A cluster pool: the slot map every thread starts from (each node's connections run the
  // handshake again before they carry traffic).
  if (pool.cluster && !ReadClusterSlots(link, pool.cluster.get(), error)) {
    *error = where + ": " + *error;
    return false;
  }
  // Said once here; the connections' handshakes need not say it again.
  if (!warning->empty()) pool.stats->warned.store(true, std::memory_order_relaxed);
  return true;
}

std::string PoolAddress(const ResolvedPool& pool) {
  if (pool.sentinel != nullptr) return pool.sentinel->Describe();
  return pool.url.host + ":" + std::to_string(pool.url.port);
}

RedisPool::RedisPool(io::IoRing& io, const ResolvedPool& pool)
    : pool_(pool),
      batcher_(
          [this](Script script, std::span<const std::string_view> keys,
                 std::span<const std::string_view> args, uint64_t affinity, UpstreamCallback cb) {
            backend_->Eval(script, keys, args, affinity, std::move(cb));
          },
          LibraryBatchRule(), pool.stats.get(), pool.cluster != nullptr,
          static_cast<size_t>(std::max(1, pool.connections))) {
  auto handshake = std::make_shared<const Handshake>(
      pool.sentinel != nullptr ? BuildMasterHandshake(pool.url) : BuildHandshake(pool.url));
  if (pool.cluster) {
    auto cluster = std::make_unique<ClusterPool>(io, pool.name, pool.connections, pool.timeout_ms,
                                                 pool.stats.get(), pool.cluster, handshake);
    cluster->SetWaitReplicas(pool.wait_replicas, pool.wait_timeout_ms);
    backend_ = std::move(cluster);
  } else {
    backend_ = std::make_unique<StandaloneBackend>(io, pool_, std::move(handshake));
  }
}

RedisPool::~RedisPool() = default;

// Every call that the batcher does not take first sends what the batcher holds for the same
// client, so a client's calls reach Redis in the order it made them.

void RedisPool::Eval(Script script, std::span<const std::string_view> keys,
                     std::span<const std::string_view> args, uint64_t affinity,
                     UpstreamCallback cb) {
  if (keys.size() == 1 && batcher_.rule().Batchable(script)) {
    return batcher_.Add(script, keys[0], args, affinity, std::move(cb));
  }
  batcher_.SendClient(affinity);
  backend_->Eval(script, keys, args, affinity, std::move(cb));
}

void RedisPool::Command(std::span<const std::string_view> args, uint64_t affinity,
                        UpstreamCallback cb) {
  batcher_.SendClient(affinity);
  backend_->Command(args, affinity, std::move(cb));
}

void RedisPool::ReadRegistry(uint64_t affinity, RegistryCallback cb) {
  batcher_.SendClient(affinity);
  backend_->ReadRegistry(affinity, std::move(cb), /*whole=*/true);
}

void RedisPool::ScanRegistry(const std::string& cursor, size_t page, RegistryCallback cb) {
  batcher_.SendClient(0);
  backend_->ScanRegistry(cursor, page, std::move(cb));
}

void RedisPool::ReadDue(int64_t max_ms, size_t limit, uint64_t affinity, DueCallback cb) {
  batcher_.SendClient(affinity);
  backend_->ReadDue(max_ms, limit, affinity, std::move(cb));
}

void RedisPool::Subscribe(const std::string& channel, std::function<void(std::string_view)> handler,
                          std::function<void()> on_subscribed) {
  backend_->Subscribe(channel, std::move(handler), std::move(on_subscribed));
}

void RedisPool::Flush() {
  batcher_.SendAll();
  backend_->Flush();
}

void RedisPool::Tick() { backend_->Tick(); }

void RedisPool::Shutdown() {
  batcher_.SendAll();
  backend_->Shutdown();
}

bool RedisPool::quiescent() const { return backend_->quiescent(); }

}  // namespace deferq::persist
