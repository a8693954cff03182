#include "persist/call_batch.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <utility>

namespace deferq::persist {

bool CallBatcher::Batchable(Script s) {
  return s == Script::kPublish || s == Script::kConsume || s == Script::kAck ||
         s == Script::kNack || s == Script::kTouch || s == Script::kCancel;
}

namespace {

// The queue a key's batch belongs to: the key without a shard's "#i" (queue/shards.h: shard i > 0
// of queue Q is the queue "Q#i", and '#' is in no name a client can give). A client's commands on
// one sharded queue take the shards in turn; order holds per shard only (SPEC §7), so each shard
// keeps a batch of its own instead of every command closing the last one.
std::string_view GroupOf(std::string_view key) {
  const size_t close = key.rfind('}');
  if (close == std::string_view::npos) return key;
  const size_t hash = key.rfind('#', close);
  return key.substr(0, hash == std::string_view::npos ? close : hash);
}

}  // namespace

void CallBatcher::Add(Script script, std::string_view key, std::span<const std::string_view> args,
                      uint64_t affinity, UpstreamCallback cb) {
  size_t bytes = key.size();
  for (std::string_view a : args) bytes += a.size();
  const std::string_view group = GroupOf(key);
  Batch* open = nullptr;
  // Sending a batch may answer its callbacks at once (a pool that is down), and they may add
  // calls: look again after each send.
  while (open == nullptr) {
    bool other = false;  // the client has an open batch of another script or queue
    Batch* same = nullptr;
    for (Batch& b : open_) {
      if (b.affinity != affinity) continue;
      if (b.script != script || GroupOf(b.key) != group) other = true;
      if (b.key == key) same = &b;
    }
    if (other) {
      SendClient(affinity);
      continue;
    }
    if (same != nullptr && same->cbs.size() < kMaxCalls && same->bytes + bytes <= kMaxBytes) {
      open = same;
      break;
    }
    if (same != nullptr) {  // full: it goes, the next one opens
      auto it = open_.begin() + (same - open_.data());
      Batch done = std::move(*it);
      open_.erase(it);
      Send(std::move(done));
      continue;
    }
    if (open_.size() >= kMaxOpen) {
      Batch oldest = std::move(open_.front());
      open_.erase(open_.begin());
      Send(std::move(oldest));
      continue;
    }
    open = &open_.emplace_back();
    open->script = script;
    open->affinity = affinity;
    open->key = key;
  }
  open->args.push_back(std::to_string(args.size()));
  open->args.insert(open->args.end(), args.begin(), args.end());
  open->cbs.push_back(std::move(cb));
  open->bytes += bytes;
}

void CallBatcher::SendClient(uint64_t affinity) {
  // In the order they were opened; each send may answer callbacks that add calls, which open
  // new batches behind these.
  for (size_t i = 0; i < open_.size();) {
    if (open_[i].affinity != affinity) {
      ++i;
      continue;
    }
    Batch done = std::move(open_[i]);
    open_.erase(open_.begin() + static_cast<ptrdiff_t>(i));
    Send(std::move(done));
    return SendClient(affinity);
  }
}

void CallBatcher::SendAll() {
  std::vector<Batch> all;
  all.swap(open_);
  for (Batch& b : all) Send(std::move(b));
}

void CallBatcher::Send(Batch batch) {
  if (batch.cbs.size() == 1) {
    // Alone: the script's own call (its arguments after the count).
    std::vector<std::string_view> args(batch.args.begin() + 1, batch.args.end());
    return sink_(batch.script, batch.key, args, batch.affinity, std::move(batch.cbs.front()));
  }
  std::vector<std::string_view> args;
  args.reserve(1 + batch.args.size());
  args.push_back(kScriptNames[static_cast<size_t>(batch.script)]);
  args.insert(args.end(), batch.args.begin(), batch.args.end());
  auto cbs = std::make_shared<std::vector<UpstreamCallback>>(std::move(batch.cbs));
  const auto more = static_cast<uint64_t>(cbs->size() - 1);  // the connection counts one
  if (stats_ != nullptr) stats_->requests.fetch_add(more, std::memory_order_relaxed);
  sink_(Script::kBatch, batch.key, args, batch.affinity,
        [cbs, more, stats = stats_](const UpstreamResult& r) {
          const redisReply* reply = r.reply;
          if (reply != nullptr && reply->type == REDIS_REPLY_ARRAY &&
              reply->elements == cbs->size()) {
            for (size_t i = 0; i < cbs->size(); ++i)
              (*cbs)[i](UpstreamResult{reply->element[i], {}});
            return;
          }
          // The batch as a whole: TRYAGAIN/TIMEOUT/NOREPLICAS (reply null), or refused (an error).
          if (reply == nullptr && stats != nullptr) {
            std::atomic<uint64_t>& counter = r.error.starts_with("TIMEOUT") ? stats->timeouts
                                             : r.error.starts_with("NOREPLICAS")
                                                 ? stats->unreplicated
                                                 : stats->failures;
            counter.fetch_add(more, std::memory_order_relaxed);
          }
          if (reply == nullptr || reply->type == REDIS_REPLY_ERROR) {
            for (auto& cb : *cbs) cb(r);
            return;
          }
          for (auto& cb : *cbs) cb(UpstreamResult{nullptr, "ERR unexpected reply from storage"});
        });
}

}  // namespace deferq::persist
