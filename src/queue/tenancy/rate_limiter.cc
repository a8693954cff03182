#include "queue/tenancy/rate_limiter.h"

#include <algorithm>
#include <iterator>

#include "persist/keys.h"
#include "queue/model/job_codec.h"

namespace deferq::queue {

namespace {

// A second's counter outlives its second by a few, so instances whose clocks are a little apart
// still share it; then it goes by itself.
constexpr const char* kCounterTtlMs = "5000";
constexpr const char* kKindTag[] = {"p", "c"};
constexpr const char* kKindField[] = {"publish", "consume"};

int Index(RateKind kind) { return static_cast<int>(kind); }

}  // namespace

std::string LimitKey(std::string_view ns) { return persist::LimitKey(ns); }

base::ShardedCounter& RateLimitRejections(RateKind kind) {
  static base::ShardedCounter counters[2];
  return counters[Index(kind)];
}

int64_t RateLimiter::Slice(int64_t limit) {
  return std::max<int64_t>(1, (limit + kSlicesPerSecond - 1) / kSlicesPerSecond);
}

void RateBucket::StartSecond(int64_t s) {
  if (sec == s) return;
  sec = s;
  tokens = 0;
  exhausted = false;
  left = -1;
}

int64_t RateBucket::Take(int64_t limit, int64_t want) {
  const int64_t slice = RateLimiter::Slice(limit);
  int64_t got = std::min(want, tokens);
  tokens -= got;
  if (got < want && !exhausted && (left < 0 || left >= limit / 4)) {
    // No token here, but Redis has not said the budget is gone, nor that it is nearly gone: on
    // credit, up to one slice until the lease answers (see the tolerance in rate_limiter.h).
    const int64_t credit = std::min(want - got, std::max<int64_t>(0, slice - debt));
    debt += credit;
    got += credit;
  }
  return got;
}

bool RateBucket::WantsLease(int64_t limit) const {
  return !lease_in_flight && !exhausted && (debt > 0 || tokens <= RateLimiter::Slice(limit) / 2);
}

bool RateBucket::Granted(int64_t limit, int64_t ask, int64_t claimed) {
  // The counter held claimed - debt - ask before this call; what is left of the budget after
  // the debt is this slice's share.
  const int64_t budget_left = limit - (claimed - ask);
  const int64_t grant = std::clamp<int64_t>(budget_left, 0, ask);
  tokens += grant;
  left = budget_left - grant;
  if (grant < ask) {
    exhausted = true;
    debt = 0;  // admitted past the budget: the counter is over it already
    return false;
  }
  return WantsLease(limit);
}

RateLimiter::Entry* RateLimiter::Find(const std::string& ns, int64_t wall_ms) {
  if (wall_ms >= next_sweep_ms_) {
    next_sweep_ms_ = wall_ms + kIdleMs / 6;
    Sweep(wall_ms, kIdleMs);
  }
  auto it = entries_.find(ns);
  if (it != entries_.end()) return &it->second;
  if (entries_.size() >= kMaxNamespaces) Sweep(wall_ms, kRefreshMs);
  if (entries_.size() >= kMaxNamespaces) return nullptr;
  return &entries_[ns];
}

void RateLimiter::Sweep(int64_t wall_ms, int64_t idle_ms) {
  // An entry with a request in flight stays: its callback finds it by name.
  std::erase_if(entries_, [&](const auto& kv) {
    const Entry& e = kv.second;
    return wall_ms - e.used_ms >= idle_ms && !e.reading && !e.bucket[0].lease_in_flight &&
           !e.bucket[1].lease_in_flight;
  });
}

int64_t RateLimiter::Admit(persist::PoolClient* pool, const std::string& ns, RateKind kind,
                           int64_t want, int64_t wall_ms) {
  if (pool == nullptr || want <= 0) return want;
  Entry* e = Find(ns, wall_ms);
  if (e == nullptr) return want;  // over kMaxNamespaces, none idle: not tracked
  e->used_ms = wall_ms;
  if (!e->reading && (e->limit[0] < 0 || wall_ms - e->read_ms >= kRefreshMs)) {
    ReadLimits(pool, ns, *e, wall_ms);
  }
  const int64_t limit = e->limit[Index(kind)];
  Bucket& b = e->bucket[Index(kind)];
  b.StartSecond(wall_ms / 1000);
  if (limit < 0) {
    // Not read yet: admitted, and charged once the limit is known (if there is one).
    b.debt += want;
    return want;
  }
  if (limit == 0) return want;
  const int64_t got = b.Take(limit, want);
  if (b.WantsLease(limit)) Lease(pool, ns, kind, *e);
  if (got == 0) RateLimitRejections(kind).Add();
  return got;
}

void RateLimiter::Refund(const std::string& ns, RateKind kind, int64_t n, int64_t admitted_ms) {
  auto it = entries_.find(ns);
  if (it == entries_.end() || n <= 0) return;
  Bucket& b = it->second.bucket[Index(kind)];
  // Admitted on credit and not charged yet: then it is never charged. (A pool outage used to
  // leave the credit of every refused command owed, so the first second after it was refused.)
  const int64_t uncharged = std::min(n, b.debt);
  b.debt -= uncharged;
  if (b.sec == admitted_ms / 1000) b.tokens += n - uncharged;
}

int64_t RateLimiter::Limit(const std::string& ns, RateKind kind) const {
  auto it = entries_.find(ns);
  return it == entries_.end() ? 0 : std::max<int64_t>(0, it->second.limit[Index(kind)]);
}

void RateLimiter::Invalidate(const std::string& ns) {
  auto it = entries_.find(ns);
  if (it != entries_.end()) it->second.read_ms = 0;
}

void RateLimiter::ReadLimits(persist::PoolClient* pool, const std::string& ns, Entry& e,
                             int64_t wall_ms) {
  e.reading = true;
  e.read_ms = wall_ms;
  const std::string key = LimitKey(ns);
  const std::string_view args[] = {"HMGET", key, kKindField[0], kKindField[1]};
  pool->Command(args, 0, [this, pool, ns](const persist::UpstreamResult& r) {
    auto it = entries_.find(ns);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    e.reading = false;
    // Redis unreachable: the limits stay as they were (unknown: admitted) and are asked for
    // again at the next command after kRefreshMs.
    if (!r.view().is_array() || r.view().size() != 2) {
      return;
    }
    for (int k = 0; k < 2; ++k) {
      int64_t v = 0;
      if (!r.view()[k].is_string() || !r.view()[k].Int(&v)) {
        v = 0;
      }
      e.limit[k] = std::max<int64_t>(0, v);
      Bucket& b = e.bucket[k];
      if (e.limit[k] == 0) {
        b.debt = 0;  // unlimited: nothing to charge
      } else if (b.debt > 0 && !b.lease_in_flight) {
        Lease(pool, ns, static_cast<RateKind>(k), e);  // charges what was admitted meanwhile
      }
    }
  });
}

void RateLimiter::Lease(persist::PoolClient* pool, const std::string& ns, RateKind kind, Entry& e) {
  const int k = Index(kind);
  Bucket& b = e.bucket[k];
  const int64_t ask = Slice(e.limit[k]);
  // The debt goes with this lease; credit admitted while it is in flight is charged by the next
  // one. Should the INCRBY fail, the debt comes back to the bucket (see below).
  const int64_t debt = b.debt;
  const int64_t sec = b.sec;
  b.debt = 0;
  b.lease_in_flight = true;
  std::string key = persist::RateKeyPrefix(ns);
  key += kKindTag[k];
  key += ':';
  key += std::to_string(sec);
  const std::string by = std::to_string(debt + ask);
  const std::string_view incr[] = {"INCRBY", key, by};
  const std::string_view expire[] = {"PEXPIRE", key, kCounterTtlMs};
  pool->Command(incr, 0, [this, pool, ns, k, sec, ask, debt](const persist::UpstreamResult& r) {
    auto it = entries_.find(ns);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    Bucket& b = e.bucket[k];
    b.lease_in_flight = false;
    int64_t claimed = 0;
    if (!r.view().Int(&claimed)) {
      // Not charged (or not known to be: a timeout may have applied it, and charging twice
      // errs on the safe side): the jobs admitted on credit stay owed and are charged by the
      // next lease, asked for at the next command (in a later second, to that second, as any
      // debt not yet sent when a second ends).
      b.debt += debt;
      return;
    }
    if (b.sec != sec) {
      // The second ended meanwhile: the slice is lost; what was admitted on credit since then
      // is charged to the new second by the next lease.
      return;
    }
    const int64_t limit = e.limit[k];
    if (limit <= 0) return;
    if (b.Granted(limit, ask, claimed)) Lease(pool, ns, static_cast<RateKind>(k), e);
  });
  pool->Command(expire, 0, [](const persist::UpstreamResult&) {});
}

}  // namespace deferq::queue
