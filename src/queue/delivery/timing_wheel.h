// A hashed hierarchical timing wheel with millisecond resolution (the classic five-level design of
// Linux's old timer.c and folly's HHWheelTimer): level 0 has 256 slots of 1 ms, levels 1-4 have 64
// slots each, 256x, 64x, 64x, 64x coarser; a timer lives in the level whose span covers its
// distance and moves down ("cascades") as time reaches its slot. Insert and cancel are O(1).
//
// Time never ticks through empty slots: per-level occupancy bitmaps give the next tick at which
// anything happens, which the event loop uses as its wait timeout, and Advance() jumps straight
// to it. Timers further than 2^32 ms (49 days) wait in the top level's farthest slot and are
// re-filed each time it comes round.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace deferq::queue {

class TimingWheel {
 public:
  using TimerId = uint64_t;  // 0 is never a valid id

  explicit TimingWheel(int64_t now_ms = 0);

  // Schedules `value` at deadline_ms (a deadline in the past fires at the next Advance).
  TimerId Schedule(int64_t deadline_ms, uint64_t value);
  // Cancels a pending timer; false when it already fired or was cancelled.
  bool Cancel(TimerId id);
  // Moves time to now_ms and appends, in deadline order per tick, the values of every timer
  // whose deadline is <= now_ms. Time never moves backwards.
  void Advance(int64_t now_ms, std::vector<uint64_t>* fired);
  // The earliest time Advance() has work to do (a timer falls due or a slot cascades); -1 when
  // no timer is pending. Never earlier than now().
  int64_t NextWakeup() const;

  int64_t now() const { return now_; }
  size_t size() const { return size_; }

  // The wheel's geometry, named as Linux's timer.c names its own: level 0 is kLevel0Size slots of
  // 1 ms; each level above has kLevelSize slots, each kLevelSize times coarser than the level
  // below (level 1 slots span kLevel0Size ms). Level l covers distances below 2^(kLevel0Bits +
  // kLevelBits * l) ms; the top level's span, 2^kSpanBits ms, is the farthest a timer is filed.
  static constexpr int kLevels = 5;
  static constexpr int kLevel0Bits = 8;
  static constexpr int kLevel0Size = 1 << kLevel0Bits;  // 256
  static constexpr int64_t kLevel0Mask = kLevel0Size - 1;
  static constexpr int kLevelBits = 6;
  static constexpr int kLevelSize = 1 << kLevelBits;  // 64
  static constexpr int64_t kLevelMask = kLevelSize - 1;
  static constexpr int kSpanBits = kLevel0Bits + kLevelBits * (kLevels - 1);  // 32: 49 days

 private:
  struct Node {
    int64_t deadline = 0;
    uint64_t value = 0;
    uint32_t gen = 0;
    int32_t prev = -1;
    int32_t next = -1;
    int16_t level = -1;  // -1: free
    int16_t slot = 0;
  };

  static int Shift(int level) { return level == 0 ? 0 : kLevel0Bits + kLevelBits * (level - 1); }
  static int Slots(int level) { return level == 0 ? kLevel0Size : kLevelSize; }
  int& Head(int level, int slot);
  void File(int32_t n);  // into the level/slot its distance from now_ calls for
  void Unlink(int32_t n);
  void Cascade(int level, int slot);
  void Expire(int slot, std::vector<uint64_t>* fired);
  // The next tick > now_ at which a non-empty slot is reached; INT64_MAX if none.
  int64_t NextEvent() const;

  int64_t now_;
  size_t size_ = 0;
  std::vector<Node> nodes_;
  std::vector<int32_t> free_;
  std::vector<int32_t> heads_[kLevels];
  std::vector<uint64_t> bitmap_[kLevels];  // one bit per slot: non-empty
};

// A timer its owner holds (folly's HHWheelTimer::Callback): armed on a wheel with the timer's own
// address as the wheel's value, it cancels itself when re-armed or destroyed, so the owner of
// the wheel turns a fired value back into its timer (FromValue) with no table in between. An
// owner derives from it; whoever advances the wheel calls Fired() on each timer it gets back.
class WheelTimer {
 public:
  WheelTimer() = default;
  WheelTimer(const WheelTimer&) = delete;
  WheelTimer& operator=(const WheelTimer&) = delete;
  ~WheelTimer() { Cancel(); }

  // Fires at at_ms on `wheel` (replacing an earlier arming).
  void Arm(TimingWheel& wheel, int64_t at_ms);
  void Cancel();
  bool armed() const { return id_ != 0; }
  int64_t at_ms() const { return at_ms_; }  // valid while armed

  static WheelTimer* FromValue(uint64_t value) { return reinterpret_cast<WheelTimer*>(value); }
  // The wheel gave this timer back: it is no longer armed.
  void Fired() { id_ = 0; }

 private:
  TimingWheel* wheel_ = nullptr;
  TimingWheel::TimerId id_ = 0;
  int64_t at_ms_ = 0;
};

}  // namespace deferq::queue
