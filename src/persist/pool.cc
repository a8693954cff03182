#include "persist/pool.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include "persist/reply_reader.h"
#include "persist/sentinel.h"

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
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout(url.host.c_str(), url.port, tv);
  if (c == nullptr || c->err) {
    *warning = where + " is unreachable (" + (c ? c->errstr : "out of memory") +
               "); commands on it answer TRYAGAIN until it comes up and passes its checks";
    if (c) redisFree(c);
    return true;
  }
  redisSetTimeout(c, tv);
  // The same steps as every connection's handshake, one at a time (startup can afford the round
  // trips): the first refusal stops before anything is written.
  const Handshake steps =
      pool.sentinel != nullptr ? BuildMasterHandshake(url) : BuildHandshake(url);
  bool library_present = false;
  for (const SetupStep& step : steps) {
    if (step.loads_library && library_present) continue;
    redisAppendFormattedCommand(c, step.request.data(), step.request.size());
    void* obj = nullptr;
    if (redisGetReply(c, &obj) != REDIS_OK || obj == nullptr) {
      *warning = where + " stopped answering during its checks (" + c->errstr +
                 "); they run again on every connection";
      break;
    }
    auto* reply = static_cast<redisReply*>(obj);
    SetupVerdict v = step.check(*reply);
    freeReplyObject(reply);
    library_present = library_present || v.library_present;
    if (IsRoleRefusal(v)) {
      // A failover in progress, not a misconfiguration: the connections follow the Sentinels.
      *warning += (warning->empty() ? where + ": " : "; ") + v.text;
      break;
    }
    if (v.kind == SetupVerdict::kRefuse) {
      *error = where + ": " + v.text;
      redisFree(c);
      return false;
    }
    if (v.kind == SetupVerdict::kWarn) {
      *warning += (warning->empty() ? where + ": " : "; ") + v.text;
    }
  }
  // A cluster pool: the slot map every thread starts from (each node's connections run the
  // handshake again before they carry traffic).
  if (pool.cluster && !ReadClusterSlots(c, pool.cluster.get(), error)) {
    *error = where + ": " + *error;
    redisFree(c);
    return false;
  }
  // Said once here; the connections' handshakes need not say it again.
  if (!warning->empty()) pool.stats->warned.store(true, std::memory_order_relaxed);
  redisFree(c);
  return true;
}

std::string PoolAddress(const ResolvedPool& pool) {
  if (pool.sentinel != nullptr) return pool.sentinel->Describe();
  return pool.url.host + ":" + std::to_string(pool.url.port);
}

RedisPool::RedisPool(io::IoRing& io, const ResolvedPool& pool)
    : name_(pool.name),
      io_(io),
      pool_(pool),
      handshake_(std::make_shared<const Handshake>(
          pool.sentinel != nullptr ? BuildMasterHandshake(pool.url) : BuildHandshake(pool.url))),
      batcher_(
          [this](Script script, std::span<const std::string_view> keys,
                 std::span<const std::string_view> args, uint64_t affinity,
                 UpstreamCallback cb) { SendEval(script, keys, args, affinity, std::move(cb)); },
          pool.stats.get(), pool.cluster != nullptr,
          static_cast<size_t>(std::max(1, pool.connections))) {
  if (pool.sentinel != nullptr && pool.sentinel->ClaimWatcher()) {
    watcher_ = std::make_unique<SentinelWatcher>(io, pool.sentinel, pool.timeout_ms);
  }
  if (pool.cluster) {
    cluster_ = std::make_unique<ClusterPool>(io, pool.name, pool.connections, pool.timeout_ms,
                                             pool.stats.get(), pool.cluster, handshake_);
    cluster_->SetWaitReplicas(pool.wait_replicas, pool.wait_timeout_ms);
    return;
  }
  for (int i = 0; i < pool.connections; ++i) {
    conns_.push_back(NewConnection());
    conns_.back()->SetWaitReplicas(pool.wait_replicas, pool.wait_timeout_ms);
    conns_.back()->Connect();
  }
}

RedisPool::~RedisPool() = default;

std::unique_ptr<UpstreamConnection> RedisPool::NewConnection() {
  auto c =
      std::make_unique<UpstreamConnection>(io_, pool_.url, pool_.addr, pool_.addr_len, pool_.name,
                                           pool_.timeout_ms, pool_.stats.get(), handshake_);
  if (pool_.sentinel != nullptr) c->SetEndpointSource(pool_.sentinel);
  return c;
}

UpstreamConnection& RedisPool::Pick(uint64_t affinity) {
  UpstreamConnection& pinned = *conns_[affinity % conns_.size()];
  if (pinned.accepting()) return pinned;
  // The pinned connection is down, which failed everything it had in flight: any ready one keeps
  // the order from here on.
  for (auto& c : conns_) {
    if (c->state() == UpstreamConnection::State::kReady) return *c;
  }
  return pinned;
}

void RedisPool::Eval(Script script, std::span<const std::string_view> keys,
                     std::span<const std::string_view> args, uint64_t affinity,
                     UpstreamCallback cb) {
  if (keys.size() == 1 && CallBatcher::Batchable(script)) {
    return batcher_.Add(script, keys[0], args, affinity, std::move(cb));
  }
  batcher_.SendClient(affinity);
  SendEval(script, keys, args, affinity, std::move(cb));
}

void RedisPool::SendEval(Script script, std::span<const std::string_view> keys,
                         std::span<const std::string_view> args, uint64_t affinity,
                         UpstreamCallback cb) {
  if (cluster_) return cluster_->Eval(script, keys, args, affinity, std::move(cb));
  std::string req;
  AppendFcall(&req, script, keys, kPoolKeys, args);
  Pick(affinity).Send(std::move(req), script, affinity, std::move(cb));
}

void RedisPool::Command(std::span<const std::string_view> args, uint64_t affinity,
                        UpstreamCallback cb) {
  batcher_.SendClient(affinity);
  if (cluster_) return cluster_->Command(args, affinity, std::move(cb));
  std::string req;
  AppendArrayHeader(&req, args.size());
  for (std::string_view a : args) AppendBulk(&req, a);
  Pick(affinity).Send(std::move(req), Script::kCount, affinity, std::move(cb));
}

namespace {

// The error of a read whose reply is not `type`: FailureOf's text, or kUnexpectedReply.
bool ReadFailed(const UpstreamResult& r, int type, std::string* error) {
  if (std::string e = FailureOf(r); !e.empty()) {
    *error = std::move(e);
    return true;
  }
  if (r.reply->type != type) {
    *error = std::string(kUnexpectedReply);
    return true;
  }
  return false;
}

void AppendStrings(const redisReply* array, std::vector<std::string>* out) {
  for (size_t i = 0; i < array->elements; ++i) {
    const redisReply* e = array->element[i];
    if (e->type == REDIS_REPLY_STRING) out->emplace_back(e->str, e->len);
  }
}

}  // namespace

void RedisPool::ReadRegistry(uint64_t affinity, RegistryCallback cb) {
  if (cluster_) {
    batcher_.SendClient(affinity);  // Command does it on the standalone path
    return cluster_->ReadRegistry(affinity, std::move(cb));
  }
  const std::string_view args[] = {"SMEMBERS", kRegistryKey};
  Command(args, affinity, [cb = std::move(cb)](const UpstreamResult& r) {
    RegistryRead read;
    if (!ReadFailed(r, REDIS_REPLY_ARRAY, &read.error)) AppendStrings(r.reply, &read.tags);
    cb(read);
  });
}

void RedisPool::ScanRegistry(const std::string& cursor, size_t page, RegistryCallback cb) {
  if (cluster_) return cluster_->ReadRegistry(0, std::move(cb), /*whole=*/false);
  const std::string count = std::to_string(page);
  const std::string_view args[] = {"SSCAN", kRegistryKey, cursor, "COUNT", count};
  Command(args, 0, [cb = std::move(cb)](const UpstreamResult& r) {
    RegistryRead read;
    // [cursor, [tag...]]
    if (!ReadFailed(r, REDIS_REPLY_ARRAY, &read.error)) {
      if (r.reply->elements != 2 || r.reply->element[0]->type != REDIS_REPLY_STRING ||
          r.reply->element[1]->type != REDIS_REPLY_ARRAY) {
        read.error = std::string(kUnexpectedReply);
      } else {
        read.cursor.assign(r.reply->element[0]->str, r.reply->element[0]->len);
        AppendStrings(r.reply->element[1], &read.tags);
      }
    }
    cb(read);
  });
}

void RedisPool::ReadDue(int64_t max_ms, size_t limit, uint64_t affinity, DueCallback cb) {
  if (cluster_) {
    batcher_.SendClient(affinity);  // Command does it on the standalone path
    return cluster_->ReadDue(max_ms, limit, affinity, std::move(cb));
  }
  const std::string max = max_ms < 0 ? std::string("+inf") : std::to_string(max_ms);
  const std::string count = std::to_string(limit);
  const std::string_view args[] = {"ZRANGEBYSCORE", kDueKey, "-inf", max,
                                   "WITHSCORES",    "LIMIT", "0",    count};
  Command(std::span<const std::string_view>(args, limit == 0 ? 5 : 8), affinity,
          [cb = std::move(cb)](const UpstreamResult& r) {
            DueRead read;
            if (!ReadFailed(r, REDIS_REPLY_ARRAY, &read.error))
              AppendDueEntries(r.reply, &read.entries);
            cb(read);
          });
}

void RedisPool::Subscribe(const std::string& channel, std::function<void(std::string_view)> handler,
                          std::function<void()> on_subscribed) {
  if (cluster_) {
    return cluster_->Subscribe(channel, std::move(handler), std::move(on_subscribed));
  }
  subscriber_ = NewConnection();
  UpstreamConnection* sub = subscriber_.get();
  sub->SetSubscriber(
      [handler = std::move(handler)](const redisReply* r) {
        // ["message", channel, payload]
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
            r->element[2]->type == REDIS_REPLY_STRING) {
          handler(std::string_view(r->element[2]->str, r->element[2]->len));
        }
      },
      [sub, channel, on_subscribed = std::move(on_subscribed)] {
        std::string req;
        AppendCommand(&req, {"SUBSCRIBE", channel});
        sub->Send(std::move(req), Script::kCount, 0, [on_subscribed](const UpstreamResult& r) {
          if (r.reply != nullptr && on_subscribed) on_subscribed();
        });
      });
  sub->Connect();
}

void RedisPool::Flush() {
  batcher_.SendAll();
  if (watcher_) watcher_->Flush();
  if (cluster_) cluster_->Flush();
  for (auto& c : conns_) c->Flush();
  if (subscriber_) subscriber_->Flush();
}

void RedisPool::Tick() {
  if (watcher_) watcher_->Tick();
  if (cluster_) cluster_->Tick();
  for (auto& c : conns_) c->Tick();
  if (subscriber_) subscriber_->Tick();
}

void RedisPool::Shutdown() {
  batcher_.SendAll();
  if (watcher_) watcher_->Shutdown();
  if (cluster_) cluster_->Shutdown();
  for (auto& c : conns_) c->Shutdown();
  if (subscriber_) subscriber_->Shutdown();
}

bool RedisPool::quiescent() const {
  if (cluster_ && !cluster_->quiescent()) return false;
  for (const auto& c : conns_) {
    if (!c->quiescent()) return false;
  }
  if (watcher_ && !watcher_->quiescent()) return false;
  return !subscriber_ || subscriber_->quiescent();
}

}  // namespace deferq::persist
