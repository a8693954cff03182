// The namespace directory of one loop thread: which pool each namespace lives in and the digests
// of its tokens, read from the metadata in pool "default" (namespace.lua) and cached for at most
// auth.cache_seconds, so that a revoked token stops working everywhere within that time.
//
// API:
//  - Fresh(ns): the entry if it was fetched less than cache_seconds ago; Known(ns): at any age.
//  - Refresh(ns, done): one lookup in flight per namespace on this thread; every caller waiting
//    for it gets `done` (error "" on success). Never blocks: the lookup is an upstream request.
//  - PoolFor(ns): the pool a namespace's queues live in. With one pool configured, that one;
//    else the pool its metadata names, "default" for a namespace without metadata.
//  - Learn(ns, pool) / Forget(ns): what this process learned about a namespace outside a lookup
//    (the pump found its queue in a pool; an admin command changed it here).
//  - FreshOwner(digest) / KnownOwner / RefreshOwner: which namespace a token belongs to (a
//    one-argument AUTH <token>), cached like the entries, "no namespace" included, so a wrong
//    token sent again costs no lookup.
//  - NoteRefused(ns, digest) / RecentlyRefused: a token a fresh lookup refused for ns is refused
//    again from the cache for cache_seconds (a refusal from an older entry is confirmed by a
//    lookup first, so a token created since works at once).
//
// Entries are per thread (no lock on the command path). Which pool a namespace lives in is also
// kept process-wide (a leaf mutex, read only when a thread has no entry), so a pump running on a
// thread that never served the namespace still finds its pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.h"
#include "persist/pool.h"

namespace deferq::queue {

struct NamespaceEntry {
  bool exists = false;               // metadata found (NAMESPACE CREATE)
  std::string pool;                  // the pool it is bound to (exists only)
  std::vector<std::string> digests;  // hex SHA-256 of its live tokens
  int64_t fetched_ms = -1;           // monotonic time the lookup was sent; -1: never answered

  // True when the namespace exists and `digest` is one of its live tokens' (every digest is
  // compared, each in constant time: no early exit).
  bool Accepts(std::string_view digest) const;
};

// Which namespace a token (its digest) belongs to; ns is empty when none does.
struct TokenOwner {
  std::string ns;
  int64_t fetched_ms = -1;
};

// The metadata keys' prefix (KEYS[1] of namespace.lua); one hash tag, docs/storage.md.
using persist::kAuthPrefix;

class NamespaceDirectory {
 public:
  using Done = std::function<void(std::string_view error)>;

  NamespaceDirectory(const Config& config,
                     const std::vector<std::unique_ptr<persist::PoolClient>>& pools);
  ~NamespaceDirectory();

  // Several pools, or auth.required: namespaces need their metadata. Otherwise every namespace
  // lives in the one pool and nothing is looked up.
  bool needed() const { return needed_; }
  int64_t cache_ms() const { return cache_ms_; }

  const NamespaceEntry* Fresh(const std::string& ns, int64_t now_ms) const;
  const NamespaceEntry* Known(const std::string& ns) const;
  void Refresh(const std::string& ns, int64_t now_ms, Done done);

  persist::PoolClient* PoolFor(const std::string& ns);
  persist::PoolClient* PoolNamed(std::string_view name) const;
  // The pool holding the metadata ("default").
  persist::PoolClient* MetadataPool() const { return PoolNamed("default"); }

  void Learn(const std::string& ns, const std::string& pool);
  void Forget(const std::string& ns);

  const TokenOwner* FreshOwner(const std::string& digest, int64_t now_ms) const;
  const TokenOwner* KnownOwner(const std::string& digest) const;
  void RefreshOwner(const std::string& digest, int64_t now_ms, Done done);

  void NoteRefused(const std::string& ns, const std::string& digest, int64_t now_ms);
  bool RecentlyRefused(const std::string& ns, std::string_view digest, int64_t now_ms) const;

 private:
  struct Slot {
    NamespaceEntry entry;
    bool in_flight = false;
    std::vector<Done> waiting;
    // Digests a fresh lookup refused, with when (at most kMaxRefused, oldest dropped first).
    std::vector<std::pair<std::string, int64_t>> refused;
  };
  struct OwnerSlot {
    TokenOwner owner;
    bool in_flight = false;
    std::vector<Done> waiting;
  };
  void OnOwner(const std::string& digest, int64_t sent_ms, const persist::UpstreamResult& r);
  // One namespace.lua read (`op` of `arg`) on the metadata pool; `on_reply` unless this
  // directory is gone by then.
  void Lookup(persist::PoolClient* meta, std::string_view op, const std::string& arg,
              std::function<void(const persist::UpstreamResult&)> on_reply);
  void OnLookup(const std::string& ns, int64_t sent_ms, const persist::UpstreamResult& r);

  const std::vector<std::unique_ptr<persist::PoolClient>>& pools_;
  const bool needed_;
  const int64_t cache_ms_;
  std::unordered_map<std::string, Slot> slots_;
  std::unordered_map<std::string, OwnerSlot> owners_;  // by token digest
  // Set while this object lives: lookups answered after it is gone are dropped.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace deferq::queue
