#include "persist/scripts.h"

#include <array>
#include <cstdio>
#include <cstdlib>

#include "base/check.h"
#include "persist/sha1.h"

namespace deferq::persist {

struct EmbeddedScript {
  std::string_view name;
  std::string_view body;
};
extern const EmbeddedScript kEmbeddedScripts[];
extern const int kEmbeddedScriptCount;

namespace {

// Must list the scripts in the order of the Script enum.
constexpr std::string_view kNames[] = {"publish", "consume",    "ack",  "nack",  "touch",
                                       "cancel",  "job",        "peek", "qstat", "purge",
                                       "pump",    "deadletter", "own"};
static_assert(std::size(kNames) == static_cast<size_t>(Script::kCount));

std::array<ScriptInfo, static_cast<size_t>(Script::kCount)> Load() {
  std::array<ScriptInfo, static_cast<size_t>(Script::kCount)> all;
  for (size_t i = 0; i < all.size(); ++i) {
    all[i].name = kNames[i];
    for (int j = 0; j < kEmbeddedScriptCount; ++j) {
      if (kEmbeddedScripts[j].name == kNames[i]) all[i].body = kEmbeddedScripts[j].body;
    }
    DQ_CHECK_MSG(!all[i].body.empty(), "script %.*s is not embedded",
                 static_cast<int>(kNames[i].size()), kNames[i].data());
    all[i].sha = Sha1Hex(all[i].body);
  }
  return all;
}

}  // namespace

const ScriptInfo& GetScript(Script s) {
  static const auto all = Load();
  return all[static_cast<size_t>(s)];
}

}  // namespace deferq::persist
