// Redis Cluster key slots, as Redis defines them: CRC16 (XMODEM: polynomial 0x1021, init 0) of
// the key, or of its hash tag (the bytes between the first '{' and the next '}', when that is not
// empty), modulo 16384.
//
// Per-slot keys: the registry and due index of a cluster pool live once per slot
// (docs/storage.md, "Registry and due index"), in keys whose hash tag maps to that slot. The tag
// of slot s is the decimal text of the smallest non-negative integer whose CRC16 modulo 16384 is
// s ("3560" for slot 0); the largest is 109757, so a tag has at most six digits. The table is
// built once (about 110,000 CRCs of short strings, a millisecond or two).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace deferq::persist {

inline constexpr int kClusterSlots = 16384;

uint16_t Crc16(std::string_view bytes);
// The slot of a key, with hash tags (Redis's keyHashSlot).
int KeySlot(std::string_view key);
// The hash tag whose slot is `slot` (0 <= slot < kClusterSlots).
const std::string& SlotTag(int slot);
// The pool-wide keys of slot `slot`: "dq:{<tag>}:queues" and "dq:{<tag>}:due".
std::string SlotRegistryKey(int slot);
std::string SlotDueKey(int slot);

}  // namespace deferq::persist
