// Name rules of SPEC §1 and §8: namespaces, queues and job ids are 1-200 bytes of
// [A-Za-z0-9_.:-].
#pragma once

#include <string_view>

namespace deferq::queue {

inline constexpr size_t kMaxNameLength = 200;

inline bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (unsigned char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace deferq::queue
