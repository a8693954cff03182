#include "queue/auth.h"

#include <utility>

#include "queue/client_port.h"
#include "queue/names.h"
#include "queue/tokens.h"
#include "queue/worker.h"

namespace deferq::queue {

namespace {

// The entry a command may use: fresh, or whatever age when the command was just run again
// after its own lookup (so cache_seconds = 0 still makes progress).
const NamespaceEntry* Usable(CommandContext& ctx, const std::string& ns) {
  NamespaceDirectory& dir = ctx.worker->namespaces();
  const bool looked_up = std::exchange(ctx.session.replay_looked_up, false);
  return looked_up ? dir.Known(ns) : dir.Fresh(ns, ctx.worker->now_ms());
}

}  // namespace

bool RequireAdmin(CommandContext& ctx, std::string_view command) {
  if (ctx.session.admin) return true;
  std::string msg = "NOPERM this user has no permissions to run the '";
  msg.append(command);
  msg += "' command";
  ctx.reply.Error(msg);
  return false;
}

void UnbindSession(Session& s) {
  s.ns = "default";
  s.authenticated = false;
  s.admin = false;
  s.token_digest.clear();
  s.auth_valid_until_ms = 0;
}

bool AwaitNamespace(CommandContext& ctx, Args args, const std::string& ns) {
  if (ctx.client == nullptr || ctx.in_exec || ctx.worker == nullptr) {
    ctx.reply.Error("ERR the namespace must be looked up first: send this command outside EXEC");
    return false;
  }
  Session* session = &ctx.session;
  ClientPort* port = ctx.client;
  session->replay.assign(args.begin(), args.end());
  const ReplyTicket ticket = port->Defer(/*blocking=*/true);
  ctx.worker->namespaces().Refresh(
      ns, ctx.worker->now_ms(), [session, port, ticket](std::string_view error) {
        proto::ReplyWriter* out = port->Begin(ticket);
        if (out == nullptr) return;  // the client left, and its session with it
        if (error.empty()) {
          session->replay_looked_up = true;  // the command runs again with the answer
        } else {
          session->replay.clear();
          out->Error(error);
        }
        port->Finish(ticket);
      });
  return true;
}

AuthOutcome Authenticate(CommandContext& ctx, Args args, std::string_view ns,
                         std::string_view token) {
  Session& s = ctx.session;
  if (ns == "admin") {
    // Always checked, whether or not auth.required is set (SPEC §8).
    if (!ctx.server.CheckAdminPassword(token)) return AuthOutcome::kWrongPass;
    UnbindSession(s);
    s.authenticated = true;
    s.admin = true;
    s.ns = "admin";
    return AuthOutcome::kOk;
  }
  if (!ValidName(ns)) return AuthOutcome::kBadNamespace;
  if (!ctx.server.config().auth_required) {
    UnbindSession(s);
    s.authenticated = true;
    s.ns = std::string(ns);
    return AuthOutcome::kOk;
  }
  if (ctx.worker == nullptr) return AuthOutcome::kWrongPass;
  const std::string name(ns);
  const bool looked_up = s.replay_looked_up;
  const NamespaceEntry* e = Usable(ctx, name);
  if (e == nullptr) {
    AwaitNamespace(ctx, args, name);
    return AuthOutcome::kAnswered;
  }
  std::string digest = DigestHex(token);
  if (!e->Accepts(digest)) {
    // A token created since the entry was cached works at once: a refusal from the cache is
    // confirmed by a fresh lookup first.
    if (!looked_up) {
      AwaitNamespace(ctx, args, name);
      return AuthOutcome::kAnswered;
    }
    return AuthOutcome::kWrongPass;
  }
  UnbindSession(s);
  s.authenticated = true;
  s.ns = name;
  s.token_digest = std::move(digest);
  s.auth_valid_until_ms = e->fetched_ms + ctx.worker->namespaces().cache_ms();
  return AuthOutcome::kOk;
}

void ReplyAuthFailure(proto::ReplyWriter& reply, AuthOutcome outcome) {
  if (outcome == AuthOutcome::kBadNamespace) {
    reply.Error("ERR invalid namespace name");
  } else if (outcome == AuthOutcome::kWrongPass) {
    reply.Error("WRONGPASS invalid username-password pair or user is disabled.");
  }
}

bool NamespaceGate(CommandContext& ctx, Args args) {
  if (ctx.worker == nullptr) return true;
  NamespaceDirectory& dir = ctx.worker->namespaces();
  if (!dir.needed()) return true;
  Session& s = ctx.session;
  if (s.admin && s.ns == "admin") return true;  // no namespace named yet: the parsers answer
  const bool check_token = ctx.server.config().auth_required && !s.admin;
  if (check_token && ctx.worker->now_ms() < s.auth_valid_until_ms) {
    s.replay_looked_up = false;
    return true;
  }
  // Inside EXEC: EXEC itself went through this gate just before.
  if (ctx.in_exec) return true;
  const NamespaceEntry* e = Usable(ctx, s.ns);
  if (e == nullptr) {
    AwaitNamespace(ctx, args, s.ns);
    return false;
  }
  if (!check_token) return true;  // the entry is only needed for the namespace's pool
  if (e->Accepts(s.token_digest)) {
    s.auth_valid_until_ms = e->fetched_ms + dir.cache_ms();
    return true;
  }
  // The token was revoked (or the namespace deleted) since this connection authenticated.
  UnbindSession(s);
  ctx.reply.Error("NOAUTH Authentication required.");
  return false;
}

}  // namespace deferq::queue
