#include "persist/standalone_backend.h"

#include <hiredis/hiredis.h>

#include <utility>

#include "persist/keys.h"
#include "persist/reply_reader.h"
#include "persist/scripts.h"
#include "persist/sentinel.h"

namespace deferq::persist {

StandaloneBackend::StandaloneBackend(io::IoRing& io, const ResolvedPool& pool,
                                     std::shared_ptr<const Handshake> handshake)
    : io_(io), pool_(pool), handshake_(std::move(handshake)) {
  if (pool.sentinel != nullptr && pool.sentinel->ClaimWatcher()) {
    watcher_ = std::make_unique<SentinelWatcher>(io, pool.sentinel, pool.timeout_ms);
  }
  for (int i = 0; i < pool.connections; ++i) {
    conns_.push_back(NewConnection());
    conns_.back()->SetWaitReplicas(pool.wait_replicas, pool.wait_timeout_ms);
    conns_.back()->Connect();
  }
}

StandaloneBackend::~StandaloneBackend() = default;

std::unique_ptr<UpstreamConnection> StandaloneBackend::NewConnection() {
  auto c =
      std::make_unique<UpstreamConnection>(io_, pool_.url, pool_.addr, pool_.addr_len, pool_.name,
                                           pool_.timeout_ms, pool_.stats.get(), handshake_);
  if (pool_.sentinel != nullptr) c->SetEndpointSource(pool_.sentinel);
  return c;
}

UpstreamConnection& StandaloneBackend::Pick(uint64_t affinity) {
  UpstreamConnection& pinned = *conns_[affinity % conns_.size()];
  if (pinned.accepting()) return pinned;
  // The pinned connection is down, which failed everything it had in flight: any ready one keeps
  // the order from here on.
  for (auto& c : conns_) {
    if (c->state() == UpstreamConnection::State::kReady) return *c;
  }
  return pinned;
}

void StandaloneBackend::Eval(Script script, std::span<const std::string_view> keys,
                             std::span<const std::string_view> args, uint64_t affinity,
                             UpstreamCallback cb) {
  std::string req;
  AppendFcall(&req, script, keys, kPoolKeys, args);
  Pick(affinity).Send(std::move(req), script, affinity, std::move(cb));
}

void StandaloneBackend::Command(std::span<const std::string_view> args, uint64_t affinity,
                                UpstreamCallback cb) {
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

void StandaloneBackend::ReadRegistry(uint64_t affinity, RegistryCallback cb, bool) {
  // One key: the read is whole or it fails.
  const std::string_view args[] = {"SMEMBERS", kRegistryKey};
  Command(args, affinity, [cb = std::move(cb)](const UpstreamResult& r) {
    RegistryRead read;
    if (!ReadFailed(r, REDIS_REPLY_ARRAY, &read.error)) AppendStrings(r.reply, &read.tags);
    cb(read);
  });
}

void StandaloneBackend::ScanRegistry(const std::string& cursor, size_t page, RegistryCallback cb) {
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

void StandaloneBackend::ReadDue(int64_t max_ms, size_t limit, uint64_t affinity, DueCallback cb) {
  const std::string max = max_ms < 0 ? std::string("+inf") : std::to_string(max_ms);
  const std::string count = std::to_string(limit);
  const std::string_view args[] = {"ZRANGEBYSCORE", kDueKey, "-inf", max,
                                   "WITHSCORES",    "LIMIT", "0",    count};
  Command(std::span<const std::string_view>(args, limit == 0 ? 5 : 8), affinity,
          [cb = std::move(cb)](const UpstreamResult& r) {
            DueRead read;
            if (!ReadFailed(r, REDIS_REPLY_ARRAY, &read.error)) {
              AppendDueEntries(r.reply, &read.entries);
            }
            cb(read);
          });
}

void StandaloneBackend::Subscribe(const std::string& channel,
                                  std::function<void(std::string_view)> handler,
                                  std::function<void()> on_subscribed) {
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

void StandaloneBackend::Flush() {
  if (watcher_) watcher_->Flush();
  for (auto& c : conns_) c->Flush();
  if (subscriber_) subscriber_->Flush();
}

void StandaloneBackend::Tick() {
  if (watcher_) watcher_->Tick();
  for (auto& c : conns_) c->Tick();
  if (subscriber_) subscriber_->Tick();
}

void StandaloneBackend::Shutdown() {
  if (watcher_) watcher_->Shutdown();
  for (auto& c : conns_) c->Shutdown();
  if (subscriber_) subscriber_->Shutdown();
}

bool StandaloneBackend::quiescent() const {
  for (const auto& c : conns_) {
    if (!c->quiescent()) return false;
  }
  if (watcher_ && !watcher_->quiescent()) return false;
  return !subscriber_ || subscriber_->quiescent();
}

}  // namespace deferq::persist
