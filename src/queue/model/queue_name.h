// A queue as the storage scripts see it: a namespace and a name, tagged "ns/queue".
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "config/queue_tag.h"
#include "persist/keys.h"

namespace deferq::queue {

struct QueueName {
  std::string ns;
  std::string queue;

  // The queue a tag "ns/queue" names (the registry's members, the due index's, pub/sub news,
  // the lateness table's keys); nullopt without a '/'. Names never hold '/', so the first one
  // splits. The one place a tag is taken apart.
  static std::optional<QueueName> Parse(std::string_view tag) {
    std::string_view ns, queue;
    if (!Split(tag, &ns, &queue)) return std::nullopt;
    return QueueName{std::string(ns), std::string(queue)};
  }
  // The same split as views into `tag` (no copy); false without a '/'.
  static bool Split(std::string_view tag, std::string_view* ns, std::string_view* queue) {
    const size_t slash = tag.find(kQueueTagSeparator);
    if (slash == std::string_view::npos) return false;
    *ns = tag.substr(0, slash);
    *queue = tag.substr(slash + 1);
    return true;
  }

  std::string tag() const { return QueueTag(ns, queue); }
  // KEYS[1] of every script: all keys of the queue share this prefix and its hash tag.
  std::string prefix() const { return persist::QueuePrefix(tag()); }
};

}  // namespace deferq::queue
