#include "queue/commands/commands.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "queue/commands/auth.h"
#include "queue/commands/transaction.h"

namespace deferq::queue {

const CommandSpec* FindCommand(std::string_view name) {
  // A dozen commands today, a few dozen with the job commands: a linear scan with an early
  // length check is as fast as hashing a lowered copy of the name.
  for (const CommandSpec& spec : CommandTable()) {
    if (EqualsIgnoreCase(spec.name, name)) return &spec;
  }
  return nullptr;
}

namespace {

// Redis 7 (server.c processCommand): the command name is cut at 128 bytes, and arguments are
// quoted one by one until the list reaches 128 bytes.
void ReplyUnknownCommand(proto::ReplyWriter& reply, Args args) {
  std::string msg = "ERR unknown command '";
  msg.append(args[0].substr(0, 128));
  msg += "', with args beginning with: ";
  std::string list;
  for (size_t i = 1; i < args.size() && list.size() < 128; ++i) {
    list += '\'';
    list.append(args[i].substr(0, 128 - list.size() + 1));
    list += "' ";
  }
  msg += list;
  reply.Error(msg);
}

}  // namespace

void Dispatch(CommandContext& ctx, Args args) {
  // Every error answered before the handler runs also dooms an open transaction (Redis's
  // rejectCommand): EXEC then answers -EXECABORT.
  const CommandSpec* spec = FindCommand(args[0]);
  ctx.spec = spec;
  ctx.dispatch = Dispatch;
  if (spec == nullptr) {
    ReplyUnknownCommand(ctx.reply, args);
    return FailTransaction(ctx.session);
  }
  const int argc = static_cast<int>(args.size());
  if ((spec->arity > 0 && argc != spec->arity) || (argc < -spec->arity)) {
    ReplyWrongArity(ctx.reply, spec->name);
    return FailTransaction(ctx.session);
  }
  // With auth.required, a connection that has not authenticated may only authenticate, ping
  // and leave (as Redis with requirepass): the commands flagged "noauth".
  if (ctx.server.config().auth_required && !ctx.session.authenticated && !spec->Has("noauth")) {
    ctx.reply.Error("NOAUTH Authentication required.");
    return FailTransaction(ctx.session);
  }
  if (spec->job) {
    if (ctx.loop == nullptr || ctx.client == nullptr) {
      ctx.reply.Error("ERR job commands are not available here");
      return FailTransaction(ctx.session);
    }
  }
  if (ctx.session.multi.active && !spec->immediate) {
    // AUTH and HELLO inside MULTI would try tokens in a batch, past the throttle's delays.
    if (spec->Has("no_multi")) {
      ctx.reply.Error("ERR Command not allowed inside a transaction");
      return FailTransaction(ctx.session);
    }
    return QueueCommand(ctx, *spec, args);
  }
  // The namespace binding is checked again once it is older than auth.cache_seconds (before a
  // job command, or before EXEC runs its queued ones); the command may wait for a lookup.
  const bool runs_jobs =
      spec->job || (spec->handler == CmdExec && ctx.session.multi.active &&
                    !ctx.session.multi.failed && !ctx.session.multi.commands.empty());
  if (runs_jobs && !NamespaceGate(ctx, args)) return;
  spec->handler(ctx, args);
}

}  // namespace deferq::queue
