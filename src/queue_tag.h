// A queue's tag, "namespace/queue": how the config's [shards.*] table, the storage keys
// ("dq:{tag}:..."), the registry and due index, pub/sub news and the lateness table name a
// queue. Names never hold '/' (SPEC §1), so the first '/' splits a tag (queue::QueueName::Split).
// It lives in src/, the config room, so that config and queue both include it.
#pragma once

#include <string>
#include <string_view>

namespace deferq {

inline constexpr char kQueueTagSeparator = '/';

// The one place a tag is joined.
inline std::string QueueTag(std::string_view ns, std::string_view queue) {
  std::string tag;
  tag.reserve(ns.size() + 1 + queue.size());
  tag.append(ns).append(1, kQueueTagSeparator).append(queue);
  return tag;
}

}  // namespace deferq
