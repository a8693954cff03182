// The Lua scripts of the storage layer (src/persist/scripts/*.lua, embedded at build time). Each
// performs one state change of a queue's jobs atomically; their headers document KEYS and ARGV.
#pragma once

#include <string>
#include <string_view>

namespace deferq::persist {

enum class Script {
  kPublish,
  kConsume,
  kAck,
  kNack,
  kTouch,
  kCancel,
  kJob,
  kPeek,
  kQstat,
  kPurge,
  kPump,
  kDeadletter,
  kOwn,
  kCount,
};

struct ScriptInfo {
  std::string_view name;  // file name without .lua
  std::string_view body;
  std::string sha;  // SHA-1 of body, as EVALSHA wants it
};

const ScriptInfo& GetScript(Script s);

}  // namespace deferq::persist
