#include "persist/cluster_slots.h"

#include <array>
#include <vector>

#include "base/check.h"
#include "persist/keys.h"

namespace deferq::persist {

namespace {

constexpr std::array<uint16_t, 256> MakeCrcTable() {
  std::array<uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
    t[i] = crc;
  }
  return t;
}
constexpr std::array<uint16_t, 256> kCrcTable = MakeCrcTable();

std::vector<std::string> BuildTags() {
  std::vector<std::string> tags(kClusterSlots);
  int found = 0;
  for (uint32_t i = 0; found < kClusterSlots; ++i) {
    std::string s = std::to_string(i);
    const int slot = Crc16(s) % kClusterSlots;
    if (tags[slot].empty()) {
      tags[slot] = std::move(s);
      ++found;
    }
  }
  return tags;
}

}  // namespace

uint16_t Crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (unsigned char c : bytes) {
    crc = static_cast<uint16_t>((crc << 8) ^ kCrcTable[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

int KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    // "{}" (an empty tag) hashes the whole key, as in Redis.
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) % kClusterSlots;
}

const std::string& SlotTag(int slot) {
  static const std::vector<std::string> tags = BuildTags();  // thread-safe initialisation
  DQ_CHECK(slot >= 0 && slot < kClusterSlots);
  return tags[slot];
}

std::string SlotRegistryKey(int slot) { return QueuePrefix(SlotTag(slot)) + "queues"; }
std::string SlotDueKey(int slot) { return QueuePrefix(SlotTag(slot)) + "due"; }

}  // namespace deferq::persist
