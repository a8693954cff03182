#include "persist/sentinel.h"

#include <hiredis/hiredis.h>

#include <charconv>

#include "base/log.h"
#include "config/config.h"
#include "persist/blocking_link.h"
#include "persist/upstream_connection.h"
#include "persist/upstream_tls.h"

namespace deferq::persist {

namespace {

// How often the watcher asks a Sentinel even when nothing happened: a safety net for a
// `+switch-master` missed while its subscription was down. One small command per second.
constexpr int64_t kAskEveryMs = 1000;
// How soon it asks again after a connection suspected the master, or a Sentinel failed to answer.
constexpr int64_t kAskAgainMs = 200;

std::string_view Text(const redisReply& r) { return std::string_view(r.str, r.len); }

bool ParsePort(std::string_view text, uint16_t* port) {
  unsigned value = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), value);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || value == 0 || value > 65535) {
    return false;
  }
  *port = static_cast<uint16_t>(value);
  return true;
}

// The Sentinels of one pool, tried in turn by one connection: a failed connect moves to the next
// at its reconnect; Next() also drops a connection whose Sentinel answered nothing useful.
class SentinelList final : public EndpointSource {
 public:
  explicit SentinelList(const std::vector<Endpoint>& sentinels) : sentinels_(sentinels) {}
  bool Current(Endpoint* out, std::string* why) const override {
    if (sentinels_.empty()) {
      *why = "no Sentinel configured";
      return false;
    }
    *out = sentinels_[index_ % sentinels_.size()];
    return true;
  }
  uint64_t generation() const override { return generation_; }
  // The connection failed: its next connect goes to the next Sentinel.
  void Suspect() override { ++index_; }
  void Next() {
    ++index_;
    ++generation_;
  }

 private:
  const std::vector<Endpoint>& sentinels_;  // owned by the SentinelMaster, which outlives this
  // One thread only (the watcher's connections), so plain integers.
  size_t index_ = 0;
  uint64_t generation_ = 0;
};

Handshake SentinelHandshake(const std::string& password) {
  Handshake steps;
  if (!password.empty()) {
    SetupStep auth;
    AppendCommand(&auth.request, {"AUTH", password});
    auth.check = [](const redisReply& r) {
      if (r.type != REDIS_REPLY_ERROR) return SetupVerdict{};
      return SetupVerdict{SetupVerdict::kRefuse, "Sentinel AUTH failed: " + std::string(Text(r))};
    };
    steps.push_back(std::move(auth));
  }
  return steps;
}

// The reply of SENTINEL get-master-addr-by-name: [ip, port], or nil when the Sentinel does not
// know the master.
bool ParseMasterAddr(const redisReply& r, Endpoint* out, std::string* why) {
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 2 || r.element[0]->type != REDIS_REPLY_STRING ||
      r.element[1]->type != REDIS_REPLY_STRING) {
    *why = r.type == REDIS_REPLY_ERROR ? "the Sentinel answered " + std::string(Text(r))
                                       : "the Sentinel does not know the master";
    return false;
  }
  uint16_t port = 0;
  if (!ParsePort(Text(*r.element[1]), &port)) {
    *why = "the Sentinel answered a bad port";
    return false;
  }
  const std::string host(Text(*r.element[0]));
  if (!NumericEndpoint(host, port, out)) {
    *why = "the Sentinel named '" + host +
           "', not an IP address (deferq needs announce-hostnames no, the default)";
    return false;
  }
  return true;
}

}  // namespace

SentinelMaster::SentinelMaster(std::string pool_name, std::string master_name,
                               std::vector<Endpoint> sentinels, std::string sentinel_password,
                               bool tls)
    : pool_name_(std::move(pool_name)),
      master_name_(std::move(master_name)),
      sentinels_(std::move(sentinels)),
      sentinel_password_(std::move(sentinel_password)),
      tls_(tls),
      sentinel_stats_(std::make_unique<PoolStats>()) {
  sentinel_stats_->record_latency = false;
}

SentinelMaster::~SentinelMaster() = default;

bool SentinelMaster::Current(Endpoint* out, std::string* why) const {
  base::MutexLock lock(&mu_);
  if (master_.port == 0) {
    *why = "no Sentinel has named the master '" + master_name_ + "' yet";
    return false;
  }
  *out = master_;
  return true;
}

void SentinelMaster::Update(const Endpoint& master, const char* how) {
  std::string was;
  {
    base::MutexLock lock(&mu_);
    if (master_.port == master.port && master_.host == master.host) return;
    was = master_.port == 0 ? "unknown" : master_.host + ":" + std::to_string(master_.port);
    master_ = master;
    generation_.fetch_add(1, std::memory_order_release);
  }
  DQ_LOG(kInfo, "pool '%s': the Sentinels name %s:%u master '%s' (was %s; %s)", pool_name_.c_str(),
         master.host.c_str(), master.port, master_name_.c_str(), was.c_str(), how);
}

std::string SentinelMaster::Describe() const {
  base::MutexLock lock(&mu_);
  if (master_.port == 0) return "?";
  return master_.host + ":" + std::to_string(master_.port);
}

bool ResolveSentinels(const PoolConfig& config, std::shared_ptr<SentinelMaster>* out,
                      std::string* error) {
  std::vector<Endpoint> sentinels;
  for (const std::string& text : config.sentinels) {
    RedisUrl url;
    if (!ParseRedisUrl(text, &url, error)) {
      *error = "pool '" + config.name + "': Sentinel address: " + *error;
      return false;
    }
    Endpoint ep;
    if (!ResolveEndpoint(url.host, url.port, &ep, error)) {
      *error = "pool '" + config.name + "': cannot resolve Sentinel " + url.host + ": " + *error;
      return false;
    }
    sentinels.push_back(std::move(ep));
  }
  *out = std::make_shared<SentinelMaster>(config.name, config.master, std::move(sentinels),
                                          config.sentinel_password, config.tls);
  return true;
}

bool FindMasterBlocking(SentinelMaster& master, Endpoint* out, std::string* why) {
  std::string last = "no Sentinel configured";
  for (const Endpoint& s : master.sentinels()) {
    const std::string where = "Sentinel " + s.host + ":" + std::to_string(s.port);
    BlockingLink link;
    std::string error;
    if (!link.Connect(s, 1000, master.tls() ? UpstreamTls() : nullptr, s.host, &error)) {
      last = where + " is unreachable (" + error + ")";
      continue;
    }
    if (!master.sentinel_password().empty()) {
      OwnedReply r = link.Command({"AUTH", master.sentinel_password()}, &error);
      if (r == nullptr || r->type == REDIS_REPLY_ERROR) {
        last = where + " refused AUTH";
        continue;
      }
    }
    OwnedReply r =
        link.Command({"SENTINEL", "get-master-addr-by-name", master.master_name()}, &error);
    std::string reason;
    if (r != nullptr && ParseMasterAddr(*r, out, &reason)) {
      master.Update(*out, "asked at startup");
      return true;
    }
    last = where + ": " + (r == nullptr ? "no answer (" + error + ")" : reason);
  }
  *why = last;
  return false;
}

SetupVerdict CheckRole(const redisReply& r) {
  if (r.type == REDIS_REPLY_ARRAY && r.elements >= 1 && r.element[0]->type == REDIS_REPLY_STRING &&
      Text(*r.element[0]) == "master") {
    return {};
  }
  const std::string role =
      r.type == REDIS_REPLY_ARRAY && r.elements >= 1 && r.element[0]->type == REDIS_REPLY_STRING
          ? std::string(Text(*r.element[0]))
          : "unreadable";
  return {
      SetupVerdict::kRefuse,
      "ROLE is " + role + ", not master (a replica, or a demoted master); asking the Sentinels"};
}

bool IsRoleRefusal(const SetupVerdict& v) {
  return v.kind == SetupVerdict::kRefuse && v.text.starts_with("ROLE is ");
}

Handshake BuildMasterHandshake(const RedisUrl& url) {
  Handshake steps = BuildHandshake(url);
  SetupStep role;
  AppendCommand(&role.request, {"ROLE"});
  role.check = CheckRole;
  // Among the checks, before the first step that writes (the library load).
  auto at = steps.begin();
  while (at != steps.end() && !at->after_checks) ++at;
  steps.insert(at, std::move(role));
  return steps;
}

bool ParseSwitchMaster(std::string_view message, std::string_view master_name, Endpoint* out) {
  // "<name> <old-ip> <old-port> <new-ip> <new-port>"
  std::string_view parts[5];
  size_t n = 0;
  size_t at = 0;
  while (n < 5 && at <= message.size()) {
    size_t end = message.find(' ', at);
    if (end == std::string_view::npos) end = message.size();
    parts[n++] = message.substr(at, end - at);
    at = end + 1;
  }
  if (n != 5 || at <= message.size() || parts[0] != master_name) return false;
  uint16_t port = 0;
  if (!ParsePort(parts[4], &port)) return false;
  return NumericEndpoint(std::string(parts[3]), port, out);
}

SentinelWatcher::SentinelWatcher(io::IoRing& io, std::shared_ptr<SentinelMaster> master,
                                 int timeout_ms)
    : io_(io), master_(std::move(master)) {
  auto handshake =
      std::make_shared<const Handshake>(SentinelHandshake(master_->sentinel_password()));
  const std::string name = master_->pool_name() + " (sentinel)";
  // The fixed address given here is replaced by the SentinelList's on every connect.
  const Endpoint& first = master_->sentinels().front();
  RedisUrl url;
  url.host = first.host;
  url.port = first.port;
  url.tls = master_->tls();
  auto make = [&](std::shared_ptr<EndpointSource> source) {
    auto c = std::make_unique<UpstreamConnection>(io_, url, first.addr, first.addr_len, name,
                                                  timeout_ms, master_->sentinel_stats(), handshake);
    c->SetEndpointSource(std::move(source));
    return c;
  };
  query_sentinels_ = std::make_shared<SentinelList>(master_->sentinels());
  events_sentinels_ = std::make_shared<SentinelList>(master_->sentinels());
  // Both start at the same Sentinel; they part ways only when one fails.
  query_ = make(query_sentinels_);
  events_ = make(events_sentinels_);
  UpstreamConnection* events = events_.get();
  events_->SetSubscriber(
      [this](const redisReply* r) {
        // ["message", "+switch-master", "<name> <old-ip> <old-port> <new-ip> <new-port>"]
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
            r->element[2]->type != REDIS_REPLY_STRING) {
          return;
        }
        Endpoint ep;
        if (ParseSwitchMaster(Text(*r->element[2]), master_->master_name(), &ep)) {
          master_->Update(ep, "+switch-master");
        }
      },
      [this, events] {
        std::string req;
        AppendCommand(&req, {"SUBSCRIBE", "+switch-master"});
        events->Send(std::move(req), Script::kCount, 0, [](const UpstreamResult&) {});
        // Announcements made while unsubscribed are lost: ask now.
        next_ask_ms_ = 0;
      });
  query_->Connect();
  events_->Connect();
}

SentinelWatcher::~SentinelWatcher() = default;

void SentinelWatcher::Ask() {
  asking_ = true;
  std::string req;
  AppendCommand(&req, {"SENTINEL", "get-master-addr-by-name", master_->master_name()});
  query_->Send(std::move(req), Script::kCount, 0, [this](const UpstreamResult& r) {
    asking_ = false;
    const int64_t now = io_.now_ms();
    if (r.reply == nullptr) {
      // This Sentinel is unreachable; the connection tries the next one.
      next_ask_ms_ = now + kAskAgainMs;
      return;
    }
    Endpoint ep;
    std::string why;
    if (ParseMasterAddr(*r.reply, &ep, &why)) {
      master_->Update(ep, "asked");
      next_ask_ms_ = now + kAskEveryMs;
      return;
    }
    DQ_LOG(kWarning, "pool '%s': %s (master '%s'); asking the next Sentinel",
           master_->pool_name().c_str(), why.c_str(), master_->master_name().c_str());
    static_cast<SentinelList*>(query_sentinels_.get())->Next();
    next_ask_ms_ = now + kAskAgainMs;
  });
}

void SentinelWatcher::Flush() {
  query_->Flush();
  events_->Flush();
}

void SentinelWatcher::Tick() {
  query_->Tick();
  events_->Tick();
  if (asking_) return;
  const int64_t now = io_.now_ms();
  bool due = now >= next_ask_ms_;
  // A connection found the master unusable: ask soon, but not once per failed connection.
  if (!due && next_ask_ms_ - now <= kAskEveryMs - kAskAgainMs && master_->TakeSuspicion()) {
    due = true;
  }
  if (due) Ask();
}

void SentinelWatcher::Shutdown() {
  query_->Shutdown();
  events_->Shutdown();
}

bool SentinelWatcher::quiescent() const { return query_->quiescent() && events_->quiescent(); }

}  // namespace deferq::persist
