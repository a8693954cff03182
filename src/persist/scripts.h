// The storage scripts (src/persist/scripts/*.lua), built into one versioned Redis Functions
// library at build time (src/persist/embed_scripts.py). Each function performs one state change
// of a queue's jobs atomically; the script headers document KEYS and ARGV.
#pragma once

#include <string>
#include <string_view>

// enum class Script { kPublish, ..., kCount } and kScriptNames (each script's name), generated
// from scripts/list.txt, the one list of the scripts.
#include "persist/script_list.h"

namespace deferq::persist {

// The library: FUNCTION LOAD REPLACE of `body` (re)defines library "deferq_<version>".
struct ScriptLibrary {
  std::string_view version;  // derived from the sources; part of every function's name
  std::string_view body;
};
const ScriptLibrary& GetLibrary();

// FCALL name of a script's function: "dq_<version>_<script>".
const std::string& FunctionName(Script s);

}  // namespace deferq::persist
