// Namespaces and the admin connection as command handlers see them (docs/commands.md, connection
// and admin commands).
//
// API:
//  - RequireAdmin(ctx, command): the one admin check every admin command uses (NAMESPACE,
//    TOKEN, POOL, LIMIT, ...): true on an admin connection, else answers -NOPERM.
//  - Authenticate(ctx, args, ns, token): AUTH and HELLO ... AUTH. Binds the connection to `ns`
//    when the token's digest is one of the namespace's (auth.required), or at once (not
//    required); `admin` checks the admin password. Under auth.required, user "default" (a
//    one-argument AUTH <token>, a redis://:token@host URL) means "the namespace this token
//    belongs to"; without it, "default" is simply the namespace named.
//  - ReplyAuthFailure(ctx, outcome, user): the failure's reply; a wrong secret is counted
//    (metric, log line) and its reply delayed (queue/commands/auth_throttle.h).
//  - NamespaceGate(ctx, args): Dispatch runs it before a job command (and EXEC): the binding is
//    checked again when it was last found valid more than auth.cache_seconds ago, so a revoked
//    token stops working on connections that authenticated before the revocation.
//
// Lookups never block the loop: a command that needs one defers a blocking reply, the lookup
// goes to pool "default" as an upstream request, and when it is in the connection runs the
// command again (Session::replay) with the answer in this thread's NamespaceDirectory.
#pragma once

#include <string>
#include <string_view>

#include "queue/commands/command_context.h"

namespace deferq::queue {

bool RequireAdmin(CommandContext& ctx, std::string_view command);

enum class AuthOutcome {
  kOk,            // bound; the caller answers
  kWrongPass,     // -WRONGPASS ...
  kBadNamespace,  // -ERR invalid namespace name
  kAnswered,      // waiting for a lookup (the command runs again), or an error was answered
};
AuthOutcome Authenticate(CommandContext& ctx, Args args, std::string_view ns,
                         std::string_view token);
void ReplyAuthFailure(CommandContext& ctx, AuthOutcome outcome, std::string_view user);

// Failed AUTHs (wrong token or admin password) since the start, every thread (INFO, /metrics).
uint64_t AuthFailures();

bool NamespaceGate(CommandContext& ctx, Args args);

// Makes the running command wait for a lookup of `ns` and run again once it is in; answers the
// lookup's error instead when it fails. False (after answering an error) where a command cannot
// wait (inside EXEC).
bool AwaitNamespace(CommandContext& ctx, Args args, const std::string& ns);

// Forgets every binding detail of the session (RESET).
void UnbindSession(Session& session);

}  // namespace deferq::queue
