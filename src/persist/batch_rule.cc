#include "persist/batch_rule.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <memory>
#include <utility>

#include "persist/reply_reader.h"

namespace deferq::persist {

namespace {

// A batch's arguments hold each call's argument count, then its arguments. Consume's calls
// (now_ms, ttr_ms, count) and a one-id ACK's (now_ms, K, derivable_sec) take 3: kCallOf3 slots.
constexpr size_t kCallOf3 = 4;

// Whether the batch has two calls or more, each of 3 arguments.
bool CallsOf3(std::span<const std::string> args) {
  if (args.size() < 2 * kCallOf3 || args.size() % kCallOf3 != 0) return false;
  for (size_t i = 0; i < args.size(); i += kCallOf3) {
    if (args[i] != "3") return false;
  }
  return true;
}

// Whether every call of the batch is a one-job consume with the same arguments (a pipeline of
// CONSUMEs on a queue: the calls of one loop iteration share now_ms).
bool SameOneJobConsumes(std::span<const std::string> args) {
  if (!CallsOf3(args) || args[3] != "1") return false;
  for (size_t i = kCallOf3; i < args.size(); i += kCallOf3) {
    if (!std::equal(args.begin(), args.begin() + kCallOf3, args.begin() + i)) return false;
  }
  return true;
}

// Whether every call of the batch is a one-id ACK made in the same ms: they go as one call of
// acks.lua.
bool OneIdAcksOfOneMs(std::span<const std::string> args) {
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

class LibraryRule final : public BatchRule {
 public:
  bool Batchable(Script s) const override {
    // The client-driven state changes of a queue: the scripts batch.lua runs.
    return s == Script::kPublish || s == Script::kConsume || s == Script::kAck ||
           s == Script::kNack || s == Script::kTouch || s == Script::kCancel;
  }
  void Send(const BatchCalls& batch, uint64_t affinity, std::vector<UpstreamCallback> cbs,
            const FcallSink& sink, PoolStats* stats) const override;

 private:
  // A batch of one-job consumes on one queue with the same arguments (a pipeline of CONSUMEs, or
  // consumers of one queue met in one iteration) goes as one consume call of COUNT n, and each
  // call gets its job, in order: a consume batch's fixed cost per call is more than the lease.
  static void SendConsumes(const BatchCalls& batch, uint64_t affinity,
                           std::vector<UpstreamCallback> cbs, const FcallSink& sink,
                           PoolStats* stats);
};

}  // namespace

void LibraryRule::Send(const BatchCalls& batch, uint64_t affinity,
                       std::vector<UpstreamCallback> batch_cbs, const FcallSink& sink,
                       PoolStats* stats) const {
  std::vector<std::string_view> keys(batch.keys.begin(), batch.keys.end());
  const bool one_queue = batch.keys.size() == 1;
  if (one_queue && batch.script == Script::kConsume && SameOneJobConsumes(batch.args)) {
    return SendConsumes(batch, affinity, std::move(batch_cbs), sink, stats);
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
    args.reserve(2 + batch.args.size() + batch.at.size());
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
  auto cbs = std::make_shared<std::vector<UpstreamCallback>>(std::move(batch_cbs));
  const auto more = static_cast<uint64_t>(cbs->size() - 1);  // the connection counts one
  if (stats != nullptr) stats->requests.fetch_add(more, std::memory_order_relaxed);
  sink(script, keys, args, affinity, [cbs, more, stats](const UpstreamResult& r) {
    const redisReply* reply = r.reply;
    if (reply != nullptr && reply->type == REDIS_REPLY_ARRAY && reply->elements == cbs->size()) {
      for (size_t i = 0; i < cbs->size(); ++i) (*cbs)[i](UpstreamResult{reply->element[i], {}});
      return;
    }
    FailEach(*cbs, more, stats, r);
  });
}

void LibraryRule::SendConsumes(const BatchCalls& batch, uint64_t affinity,
                               std::vector<UpstreamCallback> batch_cbs, const FcallSink& sink,
                               PoolStats* stats) {
  const size_t n = batch_cbs.size();
  const std::string count = std::to_string(n);
  const std::string_view keys[] = {batch.keys[0]};
  const std::string_view args[] = {batch.args[1], batch.args[2], count};
  auto cbs = std::make_shared<std::vector<UpstreamCallback>>(std::move(batch_cbs));
  const auto more = static_cast<uint64_t>(n - 1);
  if (stats != nullptr) stats->requests.fetch_add(more, std::memory_order_relaxed);
  sink(Script::kConsume, keys, args, affinity, [cbs, more, stats](const UpstreamResult& r) {
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
      left.integer = reply->element[0]->integer + static_cast<long long>(i < got ? got - 1 - i : 0);
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

const BatchRule& LibraryBatchRule() {
  static const LibraryRule rule;
  return rule;
}

}  // namespace deferq::persist
