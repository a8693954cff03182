#include "persist/pool.h"

#include <hiredis/hiredis.h>
#include <netdb.h>
#include <sys/time.h>

#include <cstring>

namespace deferq::persist {

bool ResolvePools(const Config& config, std::vector<ResolvedPool>* out, std::string* error) {
  for (const PoolConfig& pc : config.pools) {
    if (pc.addr.empty()) {
      *error = "pool '" + pc.name +
               "': Redis Cluster and Sentinel pools are not supported by this version yet; "
               "configure a standalone addr";
      return false;
    }
    ResolvedPool rp;
    rp.name = pc.name;
    rp.connections = pc.connections_per_thread;
    rp.timeout_ms = pc.timeout_ms;
    if (!ParseRedisUrl(pc.addr, &rp.url, error)) {
      *error = "pool '" + pc.name + "': " + *error;
      return false;
    }
    addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port = std::to_string(rp.url.port);
    const int rc = getaddrinfo(rp.url.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0 || res == nullptr) {
      *error = "pool '" + pc.name + "': cannot resolve " + rp.url.host + ": " + gai_strerror(rc);
      return false;
    }
    memcpy(&rp.addr, res->ai_addr, res->ai_addrlen);
    rp.addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    out->push_back(std::move(rp));
  }
  return true;
}

bool CheckPool(const ResolvedPool& pool, std::string* warning, std::string* error) {
  const std::string where =
      "pool '" + pool.name + "' (" + pool.url.host + ":" + std::to_string(pool.url.port) + ")";
  timeval tv{1, 0};
  redisContext* c = redisConnectWithTimeout(pool.url.host.c_str(), pool.url.port, tv);
  if (c == nullptr || c->err) {
    *warning = where + " is unreachable (" + (c ? c->errstr : "out of memory") +
               "); commands on it answer TRYAGAIN until it comes up and passes its checks";
    if (c) redisFree(c);
    return true;
  }
  redisSetTimeout(c, tv);
  // The same steps as every connection's handshake, one at a time (startup can afford the round
  // trips): the first refusal stops before anything is written.
  for (const SetupStep& step : BuildHandshake(pool.url)) {
    redisAppendFormattedCommand(c, step.request.data(), step.request.size());
    void* obj = nullptr;
    if (redisGetReply(c, &obj) != REDIS_OK || obj == nullptr) {
      *warning = where + " stopped answering during its checks (" + c->errstr +
                 "); they run again on every connection";
      break;
    }
    auto* reply = static_cast<redisReply*>(obj);
    const SetupVerdict v = step.check(*reply);
    freeReplyObject(reply);
    if (v.kind == SetupVerdict::kRefuse) {
      *error = where + ": " + v.text;
      redisFree(c);
      return false;
    }
    if (v.kind == SetupVerdict::kWarn) {
      *warning += (warning->empty() ? where + ": " : "; ") + v.text;
    }
  }
  // Said once here; the connections' handshakes need not say it again.
  if (!warning->empty()) pool.stats->warned.store(true, std::memory_order_relaxed);
  redisFree(c);
  return true;
}

PoolClient::PoolClient(net::IoRing& io, const ResolvedPool& pool)
    : name_(pool.name),
      io_(io),
      pool_(pool),
      handshake_(std::make_shared<const Handshake>(BuildHandshake(pool.url))) {
  for (int i = 0; i < pool.connections; ++i) {
    conns_.push_back(NewConnection());
    conns_.back()->Connect();
  }
}

std::unique_ptr<UpstreamConnection> PoolClient::NewConnection() {
  return std::make_unique<UpstreamConnection>(io_, pool_.url, pool_.addr, pool_.addr_len,
                                              pool_.name, pool_.timeout_ms, pool_.stats.get(),
                                              handshake_);
}

UpstreamConnection& PoolClient::Pick(uint64_t affinity) {
  UpstreamConnection& pinned = *conns_[affinity % conns_.size()];
  if (pinned.accepting()) return pinned;
  // The pinned connection is down, which failed everything it had in flight: any ready one keeps
  // the order from here on.
  for (auto& c : conns_) {
    if (c->state() == UpstreamConnection::State::kReady) return *c;
  }
  return pinned;
}

void PoolClient::Eval(Script script, std::span<const std::string_view> keys,
                      std::span<const std::string_view> args, uint64_t affinity,
                      UpstreamCallback cb) {
  std::string req;
  AppendArrayHeader(&req, 3 + keys.size() + std::size(kPoolKeys) + args.size());
  AppendBulk(&req, "FCALL");
  AppendBulk(&req, FunctionName(script));
  AppendBulk(&req, std::to_string(keys.size() + std::size(kPoolKeys)));
  for (std::string_view k : keys) AppendBulk(&req, k);
  for (std::string_view k : kPoolKeys) AppendBulk(&req, k);
  for (std::string_view a : args) AppendBulk(&req, a);
  Pick(affinity).Send(std::move(req), script, affinity, std::move(cb));
}

void PoolClient::Command(std::span<const std::string_view> args, uint64_t affinity,
                         UpstreamCallback cb) {
  std::string req;
  AppendArrayHeader(&req, args.size());
  for (std::string_view a : args) AppendBulk(&req, a);
  Pick(affinity).Send(std::move(req), Script::kCount, affinity, std::move(cb));
}

void PoolClient::Subscribe(const std::string& channel,
                           std::function<void(std::string_view)> handler) {
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
      [sub, channel] {
        std::string req;
        AppendCommand(&req, {"SUBSCRIBE", channel});
        sub->Send(std::move(req), Script::kCount, 0, [](const UpstreamResult&) {});
      });
  sub->Connect();
}

void PoolClient::Flush() {
  for (auto& c : conns_) c->Flush();
  if (subscriber_) subscriber_->Flush();
}

void PoolClient::Tick() {
  for (auto& c : conns_) c->Tick();
  if (subscriber_) subscriber_->Tick();
}

void PoolClient::Shutdown() {
  for (auto& c : conns_) c->Shutdown();
  if (subscriber_) subscriber_->Shutdown();
}

bool PoolClient::quiescent() const {
  for (const auto& c : conns_) {
    if (!c->quiescent()) return false;
  }
  return !subscriber_ || subscriber_->quiescent();
}

}  // namespace deferq::persist
