#include "persist/scripts.h"

#include <array>

namespace deferq::persist {

extern const std::string_view kLibraryVersion;
extern const std::string_view kLibraryBody;

const ScriptLibrary& GetLibrary() {
  static const ScriptLibrary library{kLibraryVersion, kLibraryBody};
  return library;
}

const std::string& FunctionName(Script s) {
  static const auto names = [] {
    std::array<std::string, static_cast<size_t>(Script::kCount)> all;
    for (size_t i = 0; i < all.size(); ++i) {
      all[i] = "dq_" + std::string(kLibraryVersion) + "_" + std::string(kScriptNames[i]);
    }
    return all;
  }();
  return names[static_cast<size_t>(s)];
}

}  // namespace deferq::persist
