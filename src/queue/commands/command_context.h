// What a command handler works with: the request's arguments, the CommandContext (the
// connection's session and reply writer, the server and this thread's queue state), the
// CommandSpec a handler is registered under (queue/commands/commands.h holds the table and
// Dispatch), and the small parsing and reply helpers every handler shares.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "base/ascii.h"
#include "proto/reply_writer.h"
#include "queue/context/server_context.h"
#include "queue/context/session.h"

namespace deferq::queue {

using Args = std::span<const std::string_view>;

class Loop;
class ClientPort;
class Instance;
struct CommandSpec;

struct CommandContext {
  Session& session;
  proto::ReplyWriter& reply;
  ServerContext& server;
  Loop* loop = nullptr;          // this thread's queue state (queue/context/loop.h; job commands)
  Instance* instance = nullptr;  // what the instance's threads share (queue/context/instance.h)
  ClientPort* client = nullptr;  // deferred replies for this connection
  bool in_exec = false;          // run by EXEC: nothing may block (CONSUME acts as TIMEOUT 0)
  const CommandSpec* spec = nullptr;  // set by Dispatch: the command running (metrics)
  // How a command runs another one (EXEC its queued commands): Dispatch, which sets it.
  void (*dispatch)(CommandContext& ctx, std::span<const std::string_view> args) = nullptr;
};

using Handler = void (*)(CommandContext& ctx, Args args);
// Checks a command's arguments without running it (for MULTI): false after replying the error
// the command itself would answer. Shares its parsing code with the handler.
using Checker = bool (*)(CommandContext& ctx, Args args);

// Documentation of one argument for COMMAND DOCS (redis-cli hints). The tables write each row
// with the helpers below, which name what the argument is: Required("queue", "key"),
// Optional("delay", "integer", "DELAY"), Repeated("id", "string"), and a block of them
// Optional("username_password", "block", "AUTH").With({Required(...), Required(...)}).
struct ArgDoc {
  const char* name;
  const char* type;   // "string", "integer", "double", "key", "pure-token", "oneof", "block"
  const char* token;  // nullptr when the argument has no leading keyword
  bool optional;
  bool multiple;
  std::vector<ArgDoc> sub = {};  // members of a "block" or "oneof" (redis-cli walks them)

  // This "block" or "oneof" argument with its members.
  ArgDoc With(std::vector<ArgDoc> members) && {
    sub = std::move(members);
    return std::move(*this);
  }
};

inline ArgDoc Required(const char* name, const char* type, const char* token = nullptr) {
  return {name, type, token, /*optional=*/false, /*multiple=*/false};
}
inline ArgDoc Optional(const char* name, const char* type, const char* token = nullptr) {
  return {name, type, token, /*optional=*/true, /*multiple=*/false};
}
// One or more (a list of ids, of queues).
inline ArgDoc Repeated(const char* name, const char* type, const char* token = nullptr) {
  return {name, type, token, /*optional=*/false, /*multiple=*/true};
}
// None or more.
inline ArgDoc OptionalRepeated(const char* name, const char* type, const char* token = nullptr) {
  return {name, type, token, /*optional=*/true, /*multiple=*/true};
}

// A subcommand of a container command (CLIENT SETNAME, COMMAND DOCS, ...), for COMMAND / DOCS.
struct SubcommandSpec {
  const char* name;  // "client|setname"
  int arity;
  const char* summary;
  std::vector<ArgDoc> args;
};

// What COMMAND DOCS (and COMMAND INFO, for the group and subcommands) reports of a command.
struct CommandDocs {
  const char* group;  // "connection", "server", "generic", ...
  const char* summary;
  const char* since;
  std::vector<ArgDoc> args = {};
  std::vector<SubcommandSpec> subcommands = {};
};

struct CommandSpec {
  const char* name;  // lower case
  int arity;         // Redis convention: N = exactly N args (name included), -N = at least N
  Handler handler;
  CommandDocs docs;
  std::vector<const char*> flags;  // COMMAND flags, e.g. "fast", "loading", "stale"
  bool job = false;         // a job command: needs AUTH when auth.required, works in the namespace
  Checker check = nullptr;  // argument check for MULTI; nullptr: arity is all that is checked
  // Inside MULTI: run at once instead of being queued (EXEC, DISCARD, QUIT, ...).
  bool immediate = false;
  // Its work takes several upstream round trips (CONSUME of several queues, QUEUES): inside EXEC
  // it starts after the commands before it have finished, and the ones after it wait for it.
  bool multi_step = false;

  bool Has(std::string_view flag) const {
    for (const char* f : flags) {
      if (flag == f) return true;
    }
    return false;
  }
};

// Helpers shared by handlers.
using base::EqualsIgnoreCase;
// An integer as Redis reads one (string2ll): an optional '-', then "0" alone or digits without a
// leading zero; so "-0", "007", "+1", " 1" and "" are not integers.
bool ParseInteger(std::string_view s, int64_t* out);
void ReplyWrongArity(proto::ReplyWriter& reply, std::string_view command);
void ReplySyntaxError(proto::ReplyWriter& reply);
// A HELP subcommand's reply: one simple string per line, as Redis writes them.
void ReplyHelp(proto::ReplyWriter& reply, std::span<const char* const> lines);

}  // namespace deferq::queue
