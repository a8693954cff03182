// A pool without Redis for the unit tests of queue's stateful parts (Pump, PumpOwnership,
// Waiters...): every call is recorded with its callback and stays pending until the test answers
// it, with a reply written as RESP (read by hiredis's own reader, so the part sees the same
// redisReply a real pool hands it) or with a failure such as TRYAGAIN. Header-only.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/check.h"
#include "persist/pool.h"
#include "unit/support/resp.h"

namespace deferq::testing {

class FakePool final : public persist::PoolClient {
 public:
  struct Call {
    persist::Script script = persist::Script::kCount;  // kCount: a Command
    std::vector<std::string> keys;
    std::vector<std::string> args;
    uint64_t affinity = 0;
    persist::UpstreamCallback cb;
    bool answered = false;
  };
  struct RegistryCall {
    std::string cursor;
    persist::RegistryCallback cb;
  };
  struct DueCall {
    int64_t max_ms = 0;
    size_t limit = 0;
    persist::DueCallback cb;
  };

  explicit FakePool(std::string name = "default") : name_(std::move(name)) {}

  // What the part under test asked for, in order.
  std::vector<Call> calls;
  std::vector<RegistryCall> registry_reads;
  std::vector<DueCall> due_reads;

  // The calls of `script` made so far.
  size_t Count(persist::Script script) const {
    size_t n = 0;
    for (const Call& c : calls) n += c.script == script ? 1 : 0;
    return n;
  }
  // The index of the last call of `script`.
  size_t Last(persist::Script script) const {
    for (size_t i = calls.size(); i-- > 0;) {
      if (calls[i].script == script) return i;
    }
    DQ_CHECK(false);
    return 0;
  }
  // The calls not answered yet.
  size_t Pending() const {
    size_t n = 0;
    for (const Call& c : calls) n += c.answered ? 0 : 1;
    return n;
  }
  // Answers call i with a RESP reply, or with a failure ("TRYAGAIN pool 'default' unavailable").
  void Answer(size_t i, std::string_view resp) {
    ReplyPtr reply = ParseResp(resp);
    Settle(i, {.reply = reply.get(), .error = {}});
  }
  void Fail(size_t i, std::string_view error) { Settle(i, {.reply = nullptr, .error = error}); }

  const std::string& name() const override { return name_; }
  bool cluster() const override { return false; }
  bool replicated() const override { return false; }
  void Eval(persist::Script script, std::span<const std::string_view> keys,
            std::span<const std::string_view> args, uint64_t affinity,
            persist::UpstreamCallback cb) override {
    calls.push_back({.script = script,
                     .keys = {keys.begin(), keys.end()},
                     .args = {args.begin(), args.end()},
                     .affinity = affinity,
                     .cb = std::move(cb)});
  }
  void Command(std::span<const std::string_view> args, uint64_t affinity,
               persist::UpstreamCallback cb) override {
    calls.push_back({.script = persist::Script::kCount,
                     .keys = {},
                     .args = {args.begin(), args.end()},
                     .affinity = affinity,
                     .cb = std::move(cb)});
  }
  void ReadRegistry(uint64_t, persist::RegistryCallback cb) override {
    registry_reads.push_back({.cursor = "", .cb = std::move(cb)});
  }
  void ScanRegistry(const std::string& cursor, size_t, persist::RegistryCallback cb) override {
    registry_reads.push_back({.cursor = cursor, .cb = std::move(cb)});
  }
  void ReadDue(int64_t max_ms, size_t limit, uint64_t, persist::DueCallback cb) override {
    due_reads.push_back({.max_ms = max_ms, .limit = limit, .cb = std::move(cb)});
  }
  void Subscribe(const std::string&, std::function<void(std::string_view)>,
                 std::function<void()>) override {}
  void Flush() override {}
  void Tick() override {}
  void Shutdown() override {}
  bool quiescent() const override { return Pending() == 0; }

 private:
  void Settle(size_t i, const persist::UpstreamResult& result) {
    DQ_CHECK(i < calls.size() && !calls[i].answered);
    calls[i].answered = true;
    // The callback may make more calls: moved out first, as calls may grow under it.
    persist::UpstreamCallback cb = std::move(calls[i].cb);
    cb(result);
  }

  std::string name_;
};

}  // namespace deferq::testing
