#include "queue/delivery/timing_wheel.h"

#include <algorithm>
#include <climits>

namespace deferq::queue {

namespace {

// Timer ids pack the node index (low kIdIndexBits bits) and the node's generation (the high
// bits), so a stale id never cancels a later timer that reuses the node.
constexpr int kIdIndexBits = 32;  // a node index (int32_t); the generation (uint32_t) above it
constexpr uint64_t kIdIndexMask = (uint64_t{1} << kIdIndexBits) - 1;

uint64_t MakeId(int32_t index, uint32_t gen) {
  return (static_cast<uint64_t>(gen) << kIdIndexBits) | static_cast<uint32_t>(index);
}

// Bits per word of the occupancy bitmaps.
constexpr int kWordBits = 64;

// First set bit at position >= from in a bitmap of `bits` bits, or -1.
int NextSetBit(const std::vector<uint64_t>& map, int bits, int from) {
  for (int w = from / kWordBits; w * kWordBits < bits; ++w) {
    uint64_t word = map[w];
    if (w == from / kWordBits) word &= ~uint64_t{0} << (from % kWordBits);
    if (word != 0) return w * kWordBits + __builtin_ctzll(word);
  }
  return -1;
}

}  // namespace

TimingWheel::TimingWheel(int64_t now_ms) : now_(now_ms) {
  for (int l = 0; l < kLevels; ++l) {
    heads_[l].assign(Slots(l), -1);
    bitmap_[l].assign((Slots(l) + kWordBits - 1) / kWordBits, 0);
  }
}

int& TimingWheel::Head(int level, int slot) { return heads_[level][slot]; }

void TimingWheel::File(int32_t n) {
  Node& node = nodes_[n];
  const int64_t d = std::max(node.deadline, now_);
  const int64_t delta = d - now_;
  int level = 0;
  int64_t at = d;
  if (delta >= (int64_t{1} << kSpanBits)) {
    // Beyond the top level's span: park in its farthest slot and re-file when it comes round.
    level = kLevels - 1;
    at = now_ + (int64_t{1} << kSpanBits) - 1;
  } else {
    while (level < kLevels - 1 && delta >= (int64_t{1} << (kLevel0Bits + kLevelBits * level))) {
      ++level;
    }
  }
  const int slot = static_cast<int>((at >> Shift(level)) & (Slots(level) - 1));
  node.level = static_cast<int16_t>(level);
  node.slot = static_cast<int16_t>(slot);
  node.prev = -1;
  node.next = Head(level, slot);
  if (node.next >= 0) nodes_[node.next].prev = n;
  Head(level, slot) = n;
  bitmap_[level][slot / kWordBits] |= uint64_t{1} << (slot % kWordBits);
}

void TimingWheel::Unlink(int32_t n) {
  Node& node = nodes_[n];
  if (node.prev >= 0) {
    nodes_[node.prev].next = node.next;
  } else {
    Head(node.level, node.slot) = node.next;
    if (node.next < 0)
      bitmap_[node.level][node.slot / kWordBits] &= ~(uint64_t{1} << (node.slot % kWordBits));
  }
  if (node.next >= 0) nodes_[node.next].prev = node.prev;
  node.prev = node.next = -1;
}

TimingWheel::TimerId TimingWheel::Schedule(int64_t deadline_ms, uint64_t value) {
  int32_t n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
  } else {
    n = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& node = nodes_[n];
  node.deadline = deadline_ms;
  node.value = value;
  node.gen++;
  File(n);
  ++size_;
  return MakeId(n, node.gen);
}

bool TimingWheel::Cancel(TimerId id) {
  const auto n = static_cast<int32_t>(id & kIdIndexMask);
  const auto gen = static_cast<uint32_t>(id >> kIdIndexBits);
  if (n < 0 || static_cast<size_t>(n) >= nodes_.size()) return false;
  Node& node = nodes_[n];
  if (node.level < 0 || node.gen != gen) return false;
  Unlink(n);
  node.level = -1;
  free_.push_back(n);
  --size_;
  return true;
}

void TimingWheel::Cascade(int level, int slot) {
  int32_t n = Head(level, slot);
  Head(level, slot) = -1;
  bitmap_[level][slot / kWordBits] &= ~(uint64_t{1} << (slot % kWordBits));
  while (n >= 0) {
    const int32_t next = nodes_[n].next;
    File(n);  // relative to now_: lands in a lower level (or stays parked if still far)
    n = next;
  }
}

void TimingWheel::Expire(int slot, std::vector<uint64_t>* fired) {
  int32_t n = Head(0, slot);
  if (n < 0) return;
  // Collect first: a slot may hold timers of this tick only (level 0 spans kLevel0Size ms).
  std::vector<int32_t> due;
  for (; n >= 0; n = nodes_[n].next) {
    if (nodes_[n].deadline <= now_) due.push_back(n);
  }
  std::sort(due.begin(), due.end(),
            [this](int32_t a, int32_t b) { return nodes_[a].deadline < nodes_[b].deadline; });
  for (int32_t d : due) {
    Unlink(d);
    fired->push_back(nodes_[d].value);
    nodes_[d].level = -1;
    free_.push_back(d);
    --size_;
  }
}

int64_t TimingWheel::NextEvent() const {
  int64_t best = INT64_MAX;
  // Level 0: slots hold deadlines within the next kLevel0Size ms, by absolute position.
  {
    const int idx = static_cast<int>(now_ & kLevel0Mask);
    // Includes the current slot (overdue timers).
    int k = NextSetBit(bitmap_[0], kLevel0Size, idx);
    if (k >= 0) {
      best = now_ - idx + k;
    } else if ((k = NextSetBit(bitmap_[0], kLevel0Size, 0)) >= 0) {
      best = now_ - idx + kLevel0Size + k;
    }
  }
  // Higher levels: a non-empty slot matters at the tick its block begins (its cascade).
  for (int l = 1; l < kLevels; ++l) {
    const int shift = Shift(l);
    const int64_t block = now_ >> shift;
    const int idx = static_cast<int>(block & kLevelMask);
    int k = NextSetBit(bitmap_[l], kLevelSize, static_cast<int>((idx + 1) & kLevelMask));
    int64_t at;
    if (k >= 0 && k > idx) {
      at = (block - idx + k) << shift;
    } else {
      k = NextSetBit(bitmap_[l], kLevelSize, 0);
      if (k < 0) continue;
      at = (block - idx + kLevelSize + k) << shift;
    }
    best = std::min(best, at);
  }
  return best;
}

int64_t TimingWheel::NextWakeup() const {
  if (size_ == 0) return -1;
  return std::max(NextEvent(), now_);
}

void TimingWheel::Advance(int64_t now_ms, std::vector<uint64_t>* fired) {
  // Overdue timers filed in the current slot (scheduled in the past) fire now.
  Expire(static_cast<int>(now_ & kLevel0Mask), fired);
  while (size_ > 0) {
    const int64_t t = NextEvent();
    if (t > now_ms) break;
    now_ = std::max(now_, t);
    // Cascade from the top down at block boundaries, then expire the level-0 slot.
    for (int l = kLevels - 1; l >= 1; --l) {
      if ((now_ & ((int64_t{1} << Shift(l)) - 1)) == 0) {
        Cascade(l, static_cast<int>((now_ >> Shift(l)) & kLevelMask));
      }
    }
    Expire(static_cast<int>(now_ & kLevel0Mask), fired);
  }
  now_ = std::max(now_, now_ms);
}

void WheelTimer::Arm(TimingWheel& wheel, int64_t at_ms) {
  Cancel();
  wheel_ = &wheel;
  at_ms_ = at_ms;
  id_ = wheel.Schedule(at_ms, reinterpret_cast<uint64_t>(this));
}

void WheelTimer::Cancel() {
  if (id_ == 0) return;
  wheel_->Cancel(id_);
  id_ = 0;
}

}  // namespace deferq::queue
