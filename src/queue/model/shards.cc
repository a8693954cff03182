#include "queue/model/shards.h"

#include "config/queue_tag.h"

namespace deferq::queue {

int ShardCount(const Config& cfg, std::string_view ns, std::string_view queue) {
  if (cfg.queue_shards.empty()) return 1;
  auto it = cfg.queue_shards.find(QueueTag(ns, queue));
  return it == cfg.queue_shards.end() ? 1 : it->second;
}

std::string ShardQueueName(std::string_view queue, int i) {
  std::string name(queue);
  if (i != 0) name.append(1, kShardMark).append(std::to_string(i));
  return name;
}

uint32_t Fnv1a(std::string_view data) {
  uint32_t h = 2166136261u;
  for (unsigned char c : data) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

int ShardOf(std::string_view key, int n) {
  if (n <= 1) return 0;
  // A generated id's K: 16 bytes, not starting with '#' (job_id.h).
  if (key.size() == 16 && key[0] != '#') return static_cast<uint8_t>(key[6]) % n;
  return static_cast<int>(Fnv1a(key) % static_cast<uint32_t>(n));
}

std::vector<std::string> ConsumeOrder(const Config& cfg, std::string_view ns,
                                      std::span<const std::string_view> queues, uint32_t turn) {
  std::vector<std::string> out;
  out.reserve(queues.size());
  for (std::string_view q : queues) {
    const int n = ShardCount(cfg, ns, q);
    for (int k = 0; k < n; ++k) {
      out.push_back(ShardQueueName(q, static_cast<int>((turn + static_cast<uint32_t>(k)) % n)));
    }
  }
  return out;
}

}  // namespace deferq::queue
