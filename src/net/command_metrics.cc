#include "net/command_metrics.h"

#include "queue/commands/commands.h"

namespace deferq::net {

CommandMetrics::CommandMetrics() {
  for (const queue::CommandSpec& spec : queue::CommandTable()) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->name = spec.name;
  }
  slots_.push_back(std::make_unique<Slot>());
  slots_.back()->name = "unknown";
}

}  // namespace deferq::net

namespace deferq::net {

size_t CommandMetrics::SlotOf(const queue::CommandSpec* spec) const {
  if (spec == nullptr) return unknown_slot();
  const auto& table = queue::CommandTable();
  return static_cast<size_t>(spec - table.data());
}

}  // namespace deferq::net
