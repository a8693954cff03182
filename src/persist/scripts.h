// The storage scripts (src/persist/scripts/*.lua), built into one versioned Redis Functions
// library at build time (src/persist/embed_scripts.py). Each function performs one state change
// of a queue's jobs atomically; the script headers document KEYS and ARGV.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

// enum class Script { kPublish, ..., kCount } and kScriptNames (each script's name), generated
// from scripts/list.txt, the one list of the scripts.
#include "persist/keys.h"
#include "persist/script_list.h"

namespace deferq::persist {

// The library: FUNCTION LOAD REPLACE of `body` (re)defines library "deferq_<version>".
struct ScriptLibrary {
  std::string_view version;  // derived from the sources; part of every function's name
  std::string_view body;
};
const ScriptLibrary& GetLibrary();

// How long a queue that holds no job keeps its counters (server.retain_seconds; docs/storage.md
// "Retention"). Called once at startup, before the library is first used; a value other than the
// default makes a library of its own, "deferq_<version>r<seconds>".
void ConfigureLibrary(int64_t retain_ms);

// FCALL name of a script's function: "dq_<version>_<script>".
const std::string& FunctionName(Script s);

// Appends the request FCALL <function of script> <numkeys> keys... pool_keys... args... to *out.
void AppendFcall(std::string* out, Script script, std::span<const std::string_view> keys,
                 std::span<const std::string_view> pool_keys,
                 std::span<const std::string_view> args);

}  // namespace deferq::persist
