// MULTI / EXEC / DISCARD (docs/commands.md, connection commands), as Redis does them for deferq's
// commands.
//
// API:
//  - MULTI opens a transaction in the Session. From then on Dispatch hands every command that is
//    not `immediate` to QueueCommand, which checks it (arity and auth in Dispatch, the command's
//    own argument check here) and answers +QUEUED, or answers the error at once and marks the
//    transaction failed (FailTransaction).
//  - EXEC runs the queued commands in order and answers the array of their replies; a failed
//    transaction answers -EXECABORT and runs nothing. DISCARD drops them; RESET does too.
//  - Commands that wait for Redis reply later: EXEC collects every reply by its index (an
//    ExecRun, see transaction.cc) and writes the array when the last one is in.
//
// What EXEC guarantees (docs/commands.md): each command is atomic on its own; the group runs in
// order with no other command of the connection in between; other connections' commands may
// interleave (deferq's transactions are not isolated).
#pragma once

#include "queue/commands/command_context.h"

namespace deferq::queue {

// Limits of one transaction: past them the command is refused and EXEC aborts, so a client
// cannot grow a connection's queue without bound.
inline constexpr size_t kMaxQueuedCommands = 100000;

/* MULTI */
void CmdMulti(CommandContext& ctx, Args args);
/* EXEC */
void CmdExec(CommandContext& ctx, Args args);
/* DISCARD */
void CmdDiscard(CommandContext& ctx, Args args);
/* WATCH key [key ...] | UNWATCH */
void CmdWatch(CommandContext& ctx, Args args);

// A command read after MULTI: checked, then queued (+QUEUED) or refused (the error, and EXEC will
// abort).
void QueueCommand(CommandContext& ctx, const CommandSpec& spec, Args args);

// An error was answered while a transaction is open: its EXEC will abort.
inline void FailTransaction(Session& session) {
  if (session.multi.active) session.multi.failed = true;
}

}  // namespace deferq::queue
