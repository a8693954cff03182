// The command table: maps a request's first argument to its handler, checks arity the way Redis
// does, and answers unknown commands with Redis 7's exact text. Handlers write their reply through
// the connection's ReplyWriter and may change the connection's Session.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "queue/commands/command_context.h"

namespace deferq::queue {

// The whole table, in the order COMMAND lists it.
const std::vector<CommandSpec>& CommandTable();

// Finds a command by name, case-insensitively; nullptr when unknown.
const CommandSpec* FindCommand(std::string_view name);

// Runs one request (args non-empty): unknown command and arity errors, then the handler.
void Dispatch(CommandContext& ctx, Args args);

// Answers the running command from every loop thread's clients (CLIENT LIST, CLIENT KILL, INFO
// clients): defers the reply, sends `query` to the loops, and calls `write` (on this thread)
// once all have answered; an error the query met is replied instead.
using ClientsReplyWriter = std::function<void(proto::ReplyWriter&, const ClientsReport&)>;
void ReplyWithClients(CommandContext& ctx, ClientsQuery query, ClientsReplyWriter write);

}  // namespace deferq::queue
