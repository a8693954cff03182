#include "queue/tenancy/namespaces.h"

#include "base/log.h"
#include "base/thread_annotations.h"
#include "queue/tenancy/tokens.h"

namespace deferq::queue {

namespace {

// Entries a thread keeps before it drops the expired ones (a client trying many namespace names
// costs one lookup each, and memory only until the entries expire).
constexpr size_t kTrimAbove = 10000;
// Refused digests remembered per namespace (a guesser's tokens beyond these cost a lookup each,
// at the pace the AUTH throttle allows: queue/commands/auth_throttle.h).
constexpr size_t kMaxRefused = 64;

// Which pool each namespace lives in, for the whole process (see namespaces.h): written when a
// lookup answers or the pump finds a queue, read only by a thread without an entry.
struct ProcessPools {
  base::Mutex mu;  // a leaf: held for one map operation
  std::unordered_map<std::string, std::string> pool_of DQ_GUARDED_BY(mu);
};

ProcessPools& Shared() {
  static ProcessPools* shared = new ProcessPools();  // never destroyed: threads may outlive main
  return *shared;
}

void SharedSet(const std::string& ns, const std::string& pool) {
  ProcessPools& s = Shared();
  base::MutexLock lock(&s.mu);
  auto it = s.pool_of.find(ns);
  if (it == s.pool_of.end()) {
    s.pool_of.emplace(ns, pool);
  } else if (it->second != pool) {
    it->second = pool;
  }
}

void SharedErase(const std::string& ns) {
  ProcessPools& s = Shared();
  base::MutexLock lock(&s.mu);
  s.pool_of.erase(ns);
}

// The error of a failed lookup, or "" when Redis answered.
std::string LookupError(const persist::UpstreamResult& r) { return persist::FailureOf(r); }

// Drops the entries nobody waits for that are older than cache_ms.
template <typename Slots, typename FetchedMs>
void TrimExpired(Slots& slots, int64_t now_ms, int64_t cache_ms, FetchedMs fetched_ms) {
  std::erase_if(slots, [&](const auto& kv) {
    const auto& s = kv.second;
    return !s.in_flight && s.waiting.empty() && now_ms - fetched_ms(s) >= cache_ms;
  });
}

bool SharedGet(const std::string& ns, std::string* pool) {
  ProcessPools& s = Shared();
  base::MutexLock lock(&s.mu);
  auto it = s.pool_of.find(ns);
  if (it == s.pool_of.end()) return false;
  *pool = it->second;
  return true;
}

}  // namespace

bool NamespaceEntry::Accepts(std::string_view digest) const {
  bool found = false;
  for (const std::string& d : digests) found |= DigestEquals(d, digest);
  return exists && found;
}

NamespaceDirectory::NamespaceDirectory(
    const Config& config, const std::vector<std::unique_ptr<persist::PoolClient>>& pools)
    : pools_(pools),
      needed_(config.auth_required || config.pools.size() > 1),
      cache_ms_(static_cast<int64_t>(config.auth_cache_seconds) * 1000) {}

NamespaceDirectory::~NamespaceDirectory() { *alive_ = false; }

const NamespaceEntry* NamespaceDirectory::Fresh(const std::string& ns, int64_t now_ms) const {
  auto it = slots_.find(ns);
  if (it == slots_.end() || it->second.entry.fetched_ms < 0) return nullptr;
  if (now_ms - it->second.entry.fetched_ms >= cache_ms_) return nullptr;
  return &it->second.entry;
}

const NamespaceEntry* NamespaceDirectory::Known(const std::string& ns) const {
  auto it = slots_.find(ns);
  if (it == slots_.end() || it->second.entry.fetched_ms < 0) return nullptr;
  return &it->second.entry;
}

void NamespaceDirectory::Refresh(const std::string& ns, int64_t now_ms, Done done) {
  persist::PoolClient* meta = MetadataPool();
  if (meta == nullptr) return done("ERR no pool 'default' holds the namespace metadata");
  if (slots_.size() > kTrimAbove) {
    TrimExpired(slots_, now_ms, cache_ms_, [](const Slot& s) { return s.entry.fetched_ms; });
  }
  Slot& slot = slots_[ns];
  slot.waiting.push_back(std::move(done));
  if (slot.in_flight) return;
  slot.in_flight = true;
  Lookup(meta, "lookup", ns,
         [this, ns, now_ms](const persist::UpstreamResult& r) { OnLookup(ns, now_ms, r); });
}

void NamespaceDirectory::Lookup(persist::PoolClient* meta, std::string_view op,
                                const std::string& arg,
                                std::function<void(const persist::UpstreamResult&)> on_reply) {
  const std::string_view keys[] = {kAuthPrefix};
  const std::string_view args[] = {op, arg};
  meta->Eval(persist::Script::kNamespaceRead, keys, args, 0,
             [alive = alive_, on_reply = std::move(on_reply)](const persist::UpstreamResult& r) {
               if (*alive) on_reply(r);
             });
}

void NamespaceDirectory::OnLookup(const std::string& ns, int64_t sent_ms,
                                  const persist::UpstreamResult& r) {
  auto it = slots_.find(ns);
  if (it == slots_.end()) return;
  Slot& slot = it->second;
  slot.in_flight = false;
  std::string error = LookupError(r);
  if (error.empty() && (!r.view().is_array() || r.view().size() < 1)) {
    error = "ERR unexpected reply from the namespace metadata";
  }
  if (error.empty()) {
    NamespaceEntry e;
    persist::ReplyView pool = r.view()[0];
    e.exists = pool.is_string();
    if (e.exists) e.pool.assign(pool.str());
    for (size_t i = 1; i < r.view().size(); ++i) {
      persist::ReplyView d = r.view()[i];
      if (d.is_string()) e.digests.emplace_back(d.str());
    }
    e.fetched_ms = sent_ms;
    if (e.exists) {
      SharedSet(ns, e.pool);
    } else {
      SharedErase(ns);
    }
    slot.entry = std::move(e);
  }
  std::vector<Done> waiting;
  waiting.swap(slot.waiting);
  if (!error.empty()) {
    DQ_LOG(kWarning, "namespace '%s': metadata lookup failed: %s", ns.c_str(), error.c_str());
  }
  // `slot` may be gone once a callback ran (it can start another lookup, which may trim).
  for (Done& d : waiting) d(error);
}

persist::PoolClient* NamespaceDirectory::PoolNamed(std::string_view name) const {
  for (const auto& p : pools_) {
    if (p->name() == name) return p.get();
  }
  return nullptr;
}

persist::PoolClient* NamespaceDirectory::PoolFor(const std::string& ns) {
  if (pools_.size() == 1) return pools_.front().get();
  if (const NamespaceEntry* e = Known(ns)) return PoolNamed(e->exists ? e->pool : "default");
  std::string pool;
  if (SharedGet(ns, &pool)) return PoolNamed(pool);
  return PoolNamed("default");
}

void NamespaceDirectory::Learn(const std::string& ns, const std::string& pool) {
  if (pools_.size() == 1) return;
  if (const NamespaceEntry* e = Known(ns); e != nullptr && e->exists && e->pool == pool) return;
  SharedSet(ns, pool);
}

void NamespaceDirectory::Forget(const std::string& ns) {
  auto it = slots_.find(ns);
  if (it != slots_.end() && !it->second.in_flight && it->second.waiting.empty()) {
    slots_.erase(it);
  } else if (it != slots_.end()) {
    it->second.entry.fetched_ms = -1;  // a lookup is in flight: its answer replaces it
  }
}

const TokenOwner* NamespaceDirectory::FreshOwner(const std::string& digest, int64_t now_ms) const {
  auto it = owners_.find(digest);
  if (it == owners_.end() || it->second.owner.fetched_ms < 0) return nullptr;
  if (now_ms - it->second.owner.fetched_ms >= cache_ms_) return nullptr;
  return &it->second.owner;
}

const TokenOwner* NamespaceDirectory::KnownOwner(const std::string& digest) const {
  auto it = owners_.find(digest);
  if (it == owners_.end() || it->second.owner.fetched_ms < 0) return nullptr;
  return &it->second.owner;
}

void NamespaceDirectory::RefreshOwner(const std::string& digest, int64_t now_ms, Done done) {
  persist::PoolClient* meta = MetadataPool();
  if (meta == nullptr) return done("ERR no pool 'default' holds the namespace metadata");
  if (owners_.size() > kTrimAbove) {
    TrimExpired(owners_, now_ms, cache_ms_, [](const OwnerSlot& s) { return s.owner.fetched_ms; });
  }
  OwnerSlot& slot = owners_[digest];
  slot.waiting.push_back(std::move(done));
  if (slot.in_flight) return;
  slot.in_flight = true;
  Lookup(meta, "owner", digest,
         [this, digest, now_ms](const persist::UpstreamResult& r) { OnOwner(digest, now_ms, r); });
}

void NamespaceDirectory::OnOwner(const std::string& digest, int64_t sent_ms,
                                 const persist::UpstreamResult& r) {
  auto it = owners_.find(digest);
  if (it == owners_.end()) return;
  OwnerSlot& slot = it->second;
  slot.in_flight = false;
  std::string error = LookupError(r);
  if (error.empty()) {
    slot.owner.ns = r.view().is_string() ? std::string(r.view().str()) : std::string();
    slot.owner.fetched_ms = sent_ms;
  }
  std::vector<Done> waiting;
  waiting.swap(slot.waiting);
  for (Done& d : waiting) d(error);
}

void NamespaceDirectory::NoteRefused(const std::string& ns, const std::string& digest,
                                     int64_t now_ms) {
  auto it = slots_.find(ns);
  if (it == slots_.end()) return;
  auto& refused = it->second.refused;
  if (refused.size() >= kMaxRefused) refused.erase(refused.begin());
  refused.emplace_back(digest, now_ms);
}

bool NamespaceDirectory::RecentlyRefused(const std::string& ns, std::string_view digest,
                                         int64_t now_ms) const {
  auto it = slots_.find(ns);
  if (it == slots_.end()) return false;
  for (const auto& [d, at] : it->second.refused) {
    if (now_ms - at < cache_ms_ && d == digest) return true;
  }
  return false;
}

}  // namespace deferq::queue
