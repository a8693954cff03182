#include "persist/call_batch.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <memory>
#include <utility>

#include "persist/cluster_slots.h"
#include "persist/reply_reader.h"

namespace deferq::persist {

bool CallBatcher::Batchable(Script s) {
  return s == Script::kPublish || s == Script::kConsume || s == Script::kAck ||
         s == Script::kNack || s == Script::kTouch || s == Script::kCancel;
}

namespace {

// A batch's arguments hold each call's argument count, then its arguments. Consume's calls
// (now_ms, ttr_ms, count) and a one-id ACK's (now_ms, K, derivable_sec) take 3: kCallOf3 slots.
constexpr size_t kCallOf3 = 4;

// Whether the batch has two calls or more, each of 3 arguments.
bool CallsOf3(const std::vector<std::string>& args) {
  if (args.size() < 2 * kCallOf3 || args.size() % kCallOf3 != 0) return false;
  for (size_t i = 0; i < args.size(); i += kCallOf3) {
    if (args[i] != "3") return false;
  }
  return true;
}

// Whether every call of the batch is a one-job consume with the same arguments (a pipeline of
// CONSUMEs on a queue: the calls of one loop iteration share now_ms).
bool SameOneJobConsumes(const std::vector<std::string>& args) {
  if (!CallsOf3(args) || args[3] != "1") return false;
  for (size_t i = kCallOf3; i < args.size(); i += kCallOf3) {
    if (!std::equal(args.begin(), args.begin() + kCallOf3, args.begin() + i)) return false;
  }
  return true;
}

// Whether every call of the batch is a one-id ACK made in the same ms: they go as one call of
// acks.lua.
bool OneIdAcksOfOneMs(const std::vector<std::string>& args) {
  if (!CallsOf3(args)) return false;
  for (size_t i = kCallOf3; i < args.size(); i += kCallOf3) {
    if (args[i + 1] != args[1]) return false;
  }
  return true;
}

// A batch that did not come back as one reply per call: each call gets the whole answer
// (TRYAGAIN/TIMEOUT/NOREPLICAS with no reply, or Redis's error), counted per call.
void FailEach(std::vector<UpstreamCallback>& cbs, uint64_t more, PoolStats* stats,
              const UpstreamResult& r) {
  if (r.reply == nullptr && stats != nullptr) {
    const UpstreamOutcome o = OutcomeOf(r);
    std::atomic<uint64_t>& counter = o == UpstreamOutcome::kTimedOut       ? stats->timeouts
                                     : o == UpstreamOutcome::kUnreplicated ? stats->unreplicated
                                                                           : stats->failures;
    counter.fetch_add(more, std::memory_order_relaxed);
  }
  if (r.reply == nullptr || r.reply->type == REDIS_REPLY_ERROR) {
    for (auto& cb : cbs) cb(r);
    return;
  }
  for (auto& cb : cbs) cb(UpstreamResult{nullptr, kUnexpectedReply});
}

}  // namespace

void CallBatcher::Add(Script script, std::string_view key, std::span<const std::string_view> args,
                      uint64_t affinity, UpstreamCallback cb) {
  size_t bytes = key.size();
  for (std::string_view a : args) bytes += a.size();
  const int slot = cluster_ ? KeySlot(key) : -1;
  Batch* open = nullptr;
  // Sending a batch may answer its callbacks at once (a pool that is down), and they may add
  // calls: look again after each send.
  while (open == nullptr) {
    bool other = false;  // the client has an open batch of another script
    Batch* same = nullptr;
    for (Batch& b : open_) {
      if (b.affinity != affinity) continue;
      if (b.script != script) {
        other = true;
      } else if (b.slot == slot) {
        same = &b;
      }
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
    open->slot = slot;
  }
  auto known = std::find(open->keys.begin(), open->keys.end(), key);
  if (known == open->keys.end()) known = open->keys.insert(open->keys.end(), std::string(key));
  open->at.push_back(static_cast<uint32_t>(known - open->keys.begin()));
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

void CallBatcher::Merge(Batch& to, Batch& from) {
  std::vector<uint32_t> index(from.keys.size());
  for (size_t k = 0; k < from.keys.size(); ++k) {
    auto known = std::find(to.keys.begin(), to.keys.end(), from.keys[k]);
    if (known == to.keys.end()) known = to.keys.insert(to.keys.end(), std::move(from.keys[k]));
    index[k] = static_cast<uint32_t>(known - to.keys.begin());
  }
  for (uint32_t a : from.at) to.at.push_back(index[a]);
  to.args.insert(to.args.end(), std::make_move_iterator(from.args.begin()),
                 std::make_move_iterator(from.args.end()));
  to.cbs.insert(to.cbs.end(), std::make_move_iterator(from.cbs.begin()),
                std::make_move_iterator(from.cbs.end()));
  to.bytes += from.bytes;
}

void CallBatcher::SendAll() {
  std::vector<Batch> all;
  all.swap(open_);
  if (!cluster_ && all.size() > 1) {
    // Batches of one script whose calls go over one connection become one call: each client's
    // calls stay in order, and every one of its requests takes that connection in order.
    std::vector<Batch> merged;
    for (Batch& b : all) {
      Batch* into = nullptr;
      for (Batch& m : merged) {
        if (m.script == b.script && m.affinity % connections_ == b.affinity % connections_ &&
            m.cbs.size() + b.cbs.size() <= kMaxMergedCalls &&
            m.bytes + b.bytes <= kMaxMergedBytes) {
          into = &m;
        }
      }
      if (into != nullptr) {
        Merge(*into, b);
      } else {
        merged.push_back(std::move(b));
      }
    }
    all.swap(merged);
  }
  for (Batch& b : all) Send(std::move(b));
}

void CallBatcher::Send(Batch batch) {
  std::vector<std::string_view> keys(batch.keys.begin(), batch.keys.end());
  if (batch.cbs.size() == 1) {
    // Alone: the script's own call (its arguments after the count).
    std::vector<std::string_view> args(batch.args.begin() + 1, batch.args.end());
    return sink_(batch.script, keys, args, batch.affinity, std::move(batch.cbs.front()));
  }
  const bool one_queue = batch.keys.size() == 1;
  if (one_queue && batch.script == Script::kConsume && SameOneJobConsumes(batch.args)) {
    return SendConsumes(std::move(batch));
  }
  // A batch of publishes is refused at maxmemory as one publish is; any other kind frees or
  // keeps memory and runs there too (scripts/list.txt, flags).
  Script script = batch.script == Script::kPublish ? Script::kBatch : Script::kBatchFree;
  std::vector<std::string_view> args;
  std::vector<std::string> numbers;  // the queue numbers batch.lua reads (views point here)
  if (one_queue && batch.script == Script::kAck && OneIdAcksOfOneMs(batch.args)) {
    // acks.lua: now_ms, then each call's K and derivable_sec; one reply per pair.
    script = Script::kAcks;
    args.reserve(1 + batch.args.size());
    args.push_back(batch.args[1]);
    for (size_t i = 0; i < batch.args.size(); i += kCallOf3) {
      args.push_back(batch.args[i + 2]);
      args.push_back(batch.args[i + 3]);
    }
  } else {
    // batch.lua: the script, the queue count, then each call's queue number, argument count and
    // arguments.
    numbers.reserve(batch.keys.size() + 1);
    for (size_t k = 0; k <= batch.keys.size(); ++k) numbers.push_back(std::to_string(k));
    args.reserve(2 + batch.args.size() + batch.cbs.size());
    args.push_back(kScriptNames[static_cast<size_t>(batch.script)]);
    args.push_back(numbers[batch.keys.size()]);
    size_t i = 0;
    for (uint32_t a : batch.at) {
      args.push_back(numbers[a + 1]);
      // The count Add wrote before the call's arguments (no exception on the I/O path).
      size_t n = 0;
      const std::string& count = batch.args[i];
      std::from_chars(count.data(), count.data() + count.size(), n);
      args.insert(args.end(), batch.args.begin() + static_cast<ptrdiff_t>(i),
                  batch.args.begin() + static_cast<ptrdiff_t>(i + 1 + n));
      i += 1 + n;
    }
  }
  auto cbs = std::make_shared<std::vector<UpstreamCallback>>(std::move(batch.cbs));
  const auto more = static_cast<uint64_t>(cbs->size() - 1);  // the connection counts one
  if (stats_ != nullptr) stats_->requests.fetch_add(more, std::memory_order_relaxed);
  sink_(script, keys, args, batch.affinity, [cbs, more, stats = stats_](const UpstreamResult& r) {
    const redisReply* reply = r.reply;
    if (reply != nullptr && reply->type == REDIS_REPLY_ARRAY && reply->elements == cbs->size()) {
      for (size_t i = 0; i < cbs->size(); ++i) (*cbs)[i](UpstreamResult{reply->element[i], {}});
      return;
    }
    FailEach(*cbs, more, stats, r);
  });
}

void CallBatcher::SendConsumes(Batch batch) {
  const size_t n = batch.cbs.size();
  const std::string count = std::to_string(n);
  const std::string_view keys[] = {batch.keys[0]};
  const std::string_view args[] = {batch.args[1], batch.args[2], count};
  auto cbs = std::make_shared<std::vector<UpstreamCallback>>(std::move(batch.cbs));
  const auto more = static_cast<uint64_t>(n - 1);
  if (stats_ != nullptr) stats_->requests.fetch_add(more, std::memory_order_relaxed);
  sink_(Script::kConsume, keys, args, batch.affinity,
        [cbs, more, stats = stats_](const UpstreamResult& r) {
          // consume.lua: {ready_left, then K, payload, tries_left, ttl_left_s, attempt,
          // created_ms per job}, the jobs in the order the calls would have leased them.
          constexpr size_t kJob = 6;
          const redisReply* reply = r.reply;
          if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements < 1 ||
              (reply->elements - 1) % kJob != 0 || reply->element[0]->type != REDIS_REPLY_INTEGER ||
              (reply->elements - 1) / kJob > cbs->size()) {
            return FailEach(*cbs, more, stats, r);
          }
          const size_t got = (reply->elements - 1) / kJob;
          for (size_t i = 0; i < cbs->size(); ++i) {
            // Call i's own reply, as consume.lua answers one call: its job and the gauge after
            // its lease (the jobs after it were still ready then), or, past the jobs, the gauge
            // at the end. Views into the reply, valid while the callback runs.
            redisReply left{};
            left.type = REDIS_REPLY_INTEGER;
            left.integer =
                reply->element[0]->integer + static_cast<long long>(i < got ? got - 1 - i : 0);
            redisReply* parts[1 + kJob] = {&left};
            redisReply view{};
            view.type = REDIS_REPLY_ARRAY;
            view.elements = 1;
            if (i < got) {
              std::copy_n(reply->element + 1 + i * kJob, kJob, parts + 1);
              view.elements += kJob;
            }
            view.element = parts;
            (*cbs)[i](UpstreamResult{&view, {}});
          }
        });
}

}  // namespace deferq::persist
