#include "persist/call_batch.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "persist/cluster_slots.h"

namespace deferq::persist {

void CallBatcher::Add(Script script, std::string_view key, std::span<const std::string_view> args,
                      uint64_t affinity, UpstreamCallback cb) {
  size_t bytes = key.size();
  for (std::string_view a : args) bytes += a.size();
  const int slot = cluster_ ? KeySlot(key) : -1;
  Batch* open = nullptr;
  // Sending a batch may answer its callbacks at once (a pool that is down), and they may add
  // calls: look again after each send.
  while (open == nullptr) {
    bool other = false;  // the client has an open batch of another script
    Batch* same = nullptr;
    for (Batch& b : open_) {
      if (b.affinity != affinity) continue;
      if (b.script != script) {
        other = true;
      } else if (b.slot == slot) {
        same = &b;
      }
    }
    if (other) {
      SendClient(affinity);
      continue;
    }
    if (same != nullptr && same->cbs.size() < kMaxCalls && same->bytes + bytes <= kMaxBytes) {
      open = same;
      break;
    }
    if (same != nullptr) {  // full: it goes, the next one opens
      auto it = open_.begin() + (same - open_.data());
      Batch done = std::move(*it);
      open_.erase(it);
      Send(std::move(done));
      continue;
    }
    if (open_.size() >= kMaxOpen) {
      Batch oldest = std::move(open_.front());
      open_.erase(open_.begin());
      Send(std::move(oldest));
      continue;
    }
    open = &open_.emplace_back();
    open->script = script;
    open->affinity = affinity;
    open->slot = slot;
  }
  auto known = std::find(open->keys.begin(), open->keys.end(), key);
  if (known == open->keys.end()) known = open->keys.insert(open->keys.end(), std::string(key));
  open->at.push_back(static_cast<uint32_t>(known - open->keys.begin()));
  open->args.push_back(std::to_string(args.size()));
  open->args.insert(open->args.end(), args.begin(), args.end());
  open->cbs.push_back(std::move(cb));
  open->bytes += bytes;
}

void CallBatcher::SendClient(uint64_t affinity) {
  // In the order they were opened; each send may answer callbacks that add calls, which open
  // new batches behind these.
  for (size_t i = 0; i < open_.size();) {
    if (open_[i].affinity != affinity) {
      ++i;
      continue;
    }
    Batch done = std::move(open_[i]);
    open_.erase(open_.begin() + static_cast<ptrdiff_t>(i));
    Send(std::move(done));
    return SendClient(affinity);
  }
}

void CallBatcher::Merge(Batch& to, Batch& from) {
  std::vector<uint32_t> index(from.keys.size());
  for (size_t k = 0; k < from.keys.size(); ++k) {
    auto known = std::find(to.keys.begin(), to.keys.end(), from.keys[k]);
    if (known == to.keys.end()) known = to.keys.insert(to.keys.end(), std::move(from.keys[k]));
    index[k] = static_cast<uint32_t>(known - to.keys.begin());
  }
  for (uint32_t a : from.at) to.at.push_back(index[a]);
  to.args.insert(to.args.end(), std::make_move_iterator(from.args.begin()),
                 std::make_move_iterator(from.args.end()));
  to.cbs.insert(to.cbs.end(), std::make_move_iterator(from.cbs.begin()),
                std::make_move_iterator(from.cbs.end()));
  to.bytes += from.bytes;
}

void CallBatcher::SendAll() {
  std::vector<Batch> all;
  all.swap(open_);
  if (!cluster_ && all.size() > 1) {
    // Batches of one script whose calls go over one connection become one call: each client's
    // calls stay in order, and every one of its requests takes that connection in order.
    std::vector<Batch> merged;
    for (Batch& b : all) {
      Batch* into = nullptr;
      for (Batch& m : merged) {
        if (m.script == b.script && m.affinity % connections_ == b.affinity % connections_ &&
            m.cbs.size() + b.cbs.size() <= kMaxMergedCalls &&
            m.bytes + b.bytes <= kMaxMergedBytes) {
          into = &m;
        }
      }
      if (into != nullptr) {
        Merge(*into, b);
      } else {
        merged.push_back(std::move(b));
      }
    }
    all.swap(merged);
  }
  for (Batch& b : all) Send(std::move(b));
}

void CallBatcher::Send(Batch batch) {
  if (batch.cbs.size() == 1) {
    // Alone: the script's own call (its arguments after the count).
    std::vector<std::string_view> keys(batch.keys.begin(), batch.keys.end());
    std::vector<std::string_view> args(batch.args.begin() + 1, batch.args.end());
    return sink_(batch.script, keys, args, batch.affinity, std::move(batch.cbs.front()));
  }
  rule_.Send(BatchCalls{batch.script, batch.keys, batch.at, batch.args}, batch.affinity,
             std::move(batch.cbs), sink_, stats_);
}

}  // namespace deferq::persist
