// Per-command calls, errors and latency, written by every loop thread on each command and read
// only when /metrics is scraped. Slot i is CommandTable()[i]; one more slot counts unknown
// commands, so the label set is bounded by the command table.
//
// Latency runs from the moment a command is dispatched to the moment its reply is complete
// (after the upstream round trip for job commands; including the time blocked for a blocking
// CONSUME). A reply is an error when its first byte is '-'.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/histogram.h"

namespace deferq::queue {
struct CommandSpec;
}

namespace deferq::net {

class CommandMetrics {
 public:
  CommandMetrics();

  size_t size() const { return slots_.size(); }
  size_t unknown_slot() const { return slots_.size() - 1; }
  void Record(size_t slot, int64_t us, bool error) {
    Slot& s = *slots_[slot];
    s.duration.Record(us);
    if (error) s.errors.Add();
  }

  // A command's reply is complete: `spec` is what Dispatch found (nullptr: unknown command),
  // `reply` the reply's bytes (only its first byte is looked at).
  void RecordReply(const queue::CommandSpec* spec, int64_t start_us, std::string_view reply) {
    Record(SlotOf(spec), base::MonotonicUs() - start_us, !reply.empty() && reply[0] == '-');
  }
  size_t SlotOf(const queue::CommandSpec* spec) const;

  // The command name of a slot ("unknown" for the last).
  const std::string& name(size_t slot) const { return slots_[slot]->name; }
  base::Histogram::Snapshot duration(size_t slot) const { return slots_[slot]->duration.Read(); }
  uint64_t errors(size_t slot) const { return slots_[slot]->errors.Read(); }

 private:
  struct Slot {
    std::string name;
    base::Histogram duration{base::LatencyBoundsUs()};
    base::ShardedCounter errors;
  };
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace deferq::net
