// A queue's tag, "namespace/queue": how the config's [shards.*] table, the storage keys
// ("dq:{tag}:..."), the registry and due index, pub/sub news and the lateness table name a
// queue. Names never hold '/' (docs/commands.md, names), so the first '/' splits a tag
// (queue::QueueName::Split). With the name rules of docs/commands.md that every name here follows.
// It lives in src/, the config room, so that config (pools, [shards.*]) and queue (commands) both
// include it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace deferq {

inline constexpr char kQueueTagSeparator = '/';

// Namespaces, queues, pools and job ids: 1-200 bytes of [A-Za-z0-9_.:-].
inline constexpr size_t kMaxNameLength = 200;

// The bytes a name may hold, as a table: a CONSUME of 1,000 queues checks every byte of them.
struct NameBytes {
  bool ok[256] = {};
  constexpr NameBytes() {
    for (int c = 0; c < 256; ++c) {
      ok[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '-';
    }
  }
};
inline constexpr NameBytes kNameBytes;

inline bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (unsigned char c : name) {
    if (!kNameBytes.ok[c]) return false;
  }
  return true;
}

// An option keyword of CONSUME (TTR, TIMEOUT, COUNT, any case): never a queue name, so that
// CONSUME can tell where its queues end.
inline bool IsConsumeKeyword(std::string_view s) {
  auto is = [s](std::string_view word) {
    if (s.size() != word.size()) return false;
    for (size_t i = 0; i < s.size(); ++i) {
      if ((s[i] | 0x20) != word[i]) return false;
    }
    return true;
  };
  return is("ttr") || is("timeout") || is("count");
}

inline bool ValidQueueName(std::string_view s) { return ValidName(s) && !IsConsumeKeyword(s); }

// The one place a tag is joined.
inline std::string QueueTag(std::string_view ns, std::string_view queue) {
  std::string tag;
  tag.reserve(ns.size() + 1 + queue.size());
  tag.append(ns).append(1, kQueueTagSeparator).append(queue);
  return tag;
}

}  // namespace deferq
