// Rate limits per namespace (docs/commands.md, LIMIT): jobs published and consumed per second, held
// across every thread of every instance without a command ever waiting for Redis.
//
// API:
//   Admit   a command asks for n jobs of a kind (publish, consume) in a namespace; the answer is
//           how many it may do now (0: answer -RATELIMIT). Decided locally, at once.
//   Refund  a CONSUME that got fewer jobs than it was admitted for gives the rest back.
//
// How: each thread has its own RateLimiter (no locks, no sharing). For each namespace and kind
// it holds a slice of the current unix second's budget, leased from a counter in the pool
// `default` (one INCRBY per slice: dq:rate:{ns}:<p|c>:<sec>), and asks for the next slice,
// asynchronously, when half of the one it holds is used. A command that finds no token while a
// lease is on its way is admitted on credit, at most one slice, charged to the counter by the
// next lease; once Redis answers that the second's budget is gone, commands are refused until
// the next second. Limits (dq:limit:{ns}, HASH publish consume) are read again every second,
// so LIMIT SET holds everywhere within about a second. The counter keys are not in any queue's
// hash slot, so a namespace whose queues sit in many Redis Cluster slots has one budget.
//
// Tolerance (docs/operations.md "Setting limits"): for a limit L and T threads (over all
// instances) serving the namespace in a second, slice s = max(1, ceil(L/20)): at most L + T*s
// jobs of a kind are admitted per wall-clock second, and while more are asked for, at least
// L - T*s (tokens a thread holds when the second ends are lost). A thread that has not seen a
// namespace in the last minute admits its commands until it has read the limit (one round trip).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/histogram.h"
#include "persist/pool.h"

namespace deferq::queue {

enum class RateKind { kPublish = 0, kConsume = 1 };

// The Redis key holding a namespace's limits (HASH: publish, consume; absent or 0 = unlimited).
std::string LimitKey(std::string_view ns);

// Commands refused with -RATELIMIT since start, over every thread (INFO stats).
base::ShardedCounter& RateLimitRejections(RateKind kind);

struct CommandContext;

// One kind's budget for one namespace on one thread, for one unix second: the arithmetic of
// Admit and of a lease's answer, with no Redis in it (tests/unit/queue/rate_limiter_test.cc).
struct RateBucket {
  int64_t sec = 0;         // the unix second `tokens` belong to
  int64_t tokens = 0;      // leased for `sec`, not used yet
  int64_t debt = 0;        // admitted on credit (or before the limit was known), not charged yet
  bool exhausted = false;  // Redis said `sec`'s budget is used up
  int64_t left = -1;       // budget left after the last lease of `sec` (-1: none yet)
  bool lease_in_flight = false;

  // Moves to unix second `s` if it is a new one: a new budget (tokens of the last are lost;
  // debt stays, charged by the next lease).
  void StartSecond(int64_t s);
  // Up to `want` jobs under `limit` (> 0): the tokens held, then, while Redis has not said the
  // budget is gone or nearly gone (a quarter left), credit up to one slice in all.
  int64_t Take(int64_t limit, int64_t want);
  // A lease should be asked for now: none in flight, the budget not gone, and debt to charge or
  // half a slice or less left.
  bool WantsLease(int64_t limit) const;
  // A lease of `ask` jobs (plus the debt it charged) for `sec` was answered: the counter holds
  // `claimed` now. Takes this bucket's share of what was left; true when another lease is due.
  bool Granted(int64_t limit, int64_t ask, int64_t claimed);
};

// Admits up to `want` jobs of `kind` for the command running in `ctx`, namespace `ns` (the
// running thread's RateLimiter, the pool `default`). 0 after answering -RATELIMIT, counted in
// INFO stats; the command must then change nothing.
int64_t AdmitJobs(CommandContext& ctx, const std::string& ns, RateKind kind, int64_t want);

class RateLimiter {
 public:
  // Up to `want` jobs of `kind` for `ns` at unix time wall_ms: how many are admitted (0..want).
  // `pool` is the pool `default`, where the budgets live (nullptr: nothing is limited).
  int64_t Admit(persist::PoolClient* pool, const std::string& ns, RateKind kind, int64_t want,
                int64_t wall_ms);
  // Gives back `n` jobs admitted at admitted_ms but not used (a CONSUME that got fewer, a
  // PUBLISH Redis never applied): what is still owed on credit is forgiven first, the rest comes
  // back as tokens when it is still the same second.
  void Refund(const std::string& ns, RateKind kind, int64_t n, int64_t admitted_ms);
  // The limit this thread enforces (jobs/s, 0 = none): for the -RATELIMIT text.
  int64_t Limit(const std::string& ns, RateKind kind) const;
  // The limits changed (LIMIT SET on this thread): read them again at the next command.
  void Invalidate(const std::string& ns);

  // Bounds (see docs/operations.md): limits are read again after kRefreshMs; a namespace not
  // seen for kIdleMs is forgotten; at most kMaxNamespaces are tracked per thread (past that, and
  // when none is idle, a new namespace is admitted unlimited until room is made).
  static constexpr int64_t kRefreshMs = 1000;
  static constexpr int64_t kIdleMs = 60000;
  static constexpr size_t kMaxNamespaces = 100000;
  // One slice of a limit L: max(1, ceil(L / kSlicesPerSecond)).
  static constexpr int64_t kSlicesPerSecond = 20;
  static int64_t Slice(int64_t limit);

 private:
  using Bucket = RateBucket;
  struct Entry {
    int64_t limit[2] = {-1, -1};  // jobs/s per kind; -1 until read, 0 = unlimited
    int64_t read_ms = 0;          // when the limits were last asked for
    bool reading = false;
    int64_t used_ms = 0;
    Bucket bucket[2];
  };

  Entry* Find(const std::string& ns, int64_t wall_ms);
  void ReadLimits(persist::PoolClient* pool, const std::string& ns, Entry& e, int64_t wall_ms);
  void Lease(persist::PoolClient* pool, const std::string& ns, RateKind kind, Entry& e);
  void Sweep(int64_t wall_ms, int64_t idle_ms);

  std::unordered_map<std::string, Entry> entries_;
  int64_t next_sweep_ms_ = 0;
};

}  // namespace deferq::queue
