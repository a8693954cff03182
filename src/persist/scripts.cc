#include "persist/scripts.h"

#include <array>

namespace deferq::persist {

extern const std::string_view kLibraryVersion;
extern const std::string_view kLibraryBody;

namespace {

// Must list the scripts in the order of the Script enum, with the names the build gives them.
constexpr std::string_view kNames[] = {"publish", "consume",    "ack",  "nack",  "touch",
                                       "cancel",  "job",        "peek", "qstat", "purge",
                                       "pump",    "deadletter", "own"};
static_assert(std::size(kNames) == static_cast<size_t>(Script::kCount));

}  // namespace

const ScriptLibrary& GetLibrary() {
  static const ScriptLibrary library{kLibraryVersion, kLibraryBody};
  return library;
}

const std::string& FunctionName(Script s) {
  static const auto names = [] {
    std::array<std::string, static_cast<size_t>(Script::kCount)> all;
    for (size_t i = 0; i < all.size(); ++i) {
      all[i] = "dq_" + std::string(kLibraryVersion) + "_" + std::string(kNames[i]);
    }
    return all;
  }();
  return names[static_cast<size_t>(s)];
}

}  // namespace deferq::persist
