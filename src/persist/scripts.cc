#include "persist/scripts.h"

#include <array>

#include "base/check.h"
#include "proto/request_writer.h"

namespace deferq::persist {

extern const std::string_view kLibraryVersion;
extern const std::string_view kLibraryBody;

namespace {

// The retention line of common/keys.lua, as the build embeds it (the default value).
constexpr std::string_view kRetainLine = "local RETAIN_MS = 600000\n";
constexpr int64_t kDefaultRetainMs = 600000;

int64_t g_retain_ms = kDefaultRetainMs;
bool g_library_built = false;

struct Built {
  std::string version;
  std::string body;
};

// The library with the configured retention: the embedded text as it is for the default, else
// the retention line replaced and every use of the version ("deferq_<v>", "dq_<v>_") given a
// suffix, so two retentions on one Redis are two libraries, each calling its own functions.
const Built& Library() {
  static const Built built = [] {
    g_library_built = true;
    Built b{std::string(kLibraryVersion), std::string(kLibraryBody)};
    if (g_retain_ms == kDefaultRetainMs) return b;
    const size_t at = b.body.find(kRetainLine);
    DQ_CHECK(at != std::string::npos);
    b.body.replace(at, kRetainLine.size(),
                   "local RETAIN_MS = " + std::to_string(g_retain_ms) + "\n");
    const std::string suffixed = b.version + "r" + std::to_string(g_retain_ms / 1000);
    for (size_t pos = 0; (pos = b.body.find(b.version, pos)) != std::string::npos;) {
      b.body.replace(pos, b.version.size(), suffixed);
      pos += suffixed.size();
    }
    b.version = suffixed;
    return b;
  }();
  return built;
}

}  // namespace

void ConfigureLibrary(int64_t retain_ms) {
  DQ_CHECK(!g_library_built);
  g_retain_ms = retain_ms;
}

const ScriptLibrary& GetLibrary() {
  static const ScriptLibrary library{Library().version, Library().body};
  return library;
}

const std::string& FunctionName(Script s) {
  static const auto names = [] {
    std::array<std::string, static_cast<size_t>(Script::kCount)> all;
    for (size_t i = 0; i < all.size(); ++i) {
      all[i] = "dq_" + Library().version + "_" + std::string(kScriptNames[i]);
    }
    return all;
  }();
  return names[static_cast<size_t>(s)];
}

void AppendFcall(std::string* out, Script script, std::span<const std::string_view> keys,
                 std::span<const std::string_view> pool_keys,
                 std::span<const std::string_view> args) {
  proto::AppendArrayHeader(out, 3 + keys.size() + pool_keys.size() + args.size());
  proto::AppendBulk(out, "FCALL");
  proto::AppendBulk(out, FunctionName(script));
  proto::AppendBulk(out, std::to_string(keys.size() + pool_keys.size()));
  for (std::string_view k : keys) proto::AppendBulk(out, k);
  for (std::string_view k : pool_keys) proto::AppendBulk(out, k);
  for (std::string_view a : args) proto::AppendBulk(out, a);
}

}  // namespace deferq::persist
