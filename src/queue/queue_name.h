// A queue as the storage scripts see it: a namespace and a name, tagged "ns/queue".
#pragma once

#include <string>

namespace deferq::queue {

struct QueueName {
  std::string ns;
  std::string queue;
  std::string tag() const { return ns + "/" + queue; }
  // KEYS[1] of every script: all keys of the queue share this prefix and its hash tag.
  std::string prefix() const { return "dq:{" + ns + "/" + queue + "}:"; }
};

}  // namespace deferq::queue
