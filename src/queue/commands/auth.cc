#include "queue/commands/auth.h"

#include "config/queue_tag.h"
#include "queue/commands/auth_throttle.h"
#include "queue/context/client_port.h"
#include "queue/context/instance.h"
#include "queue/context/loop.h"
#include "queue/tenancy/tokens.h"

namespace deferq::queue {

namespace {

base::ShardedCounter& FailureCounter() {
  static base::ShardedCounter counter;
  return counter;
}

constexpr std::string_view kWrongPass =
    "WRONGPASS invalid username-password pair or user is disabled.";

// Makes the running command wait for `start`'s lookup and run again once it is in (or answer its
// error). False (after answering an error) where a command cannot wait (inside EXEC).
bool AwaitLookup(CommandContext& ctx, Args args,
                 const std::function<void(NamespaceDirectory::Done)>& start) {
  if (ctx.client == nullptr || ctx.in_exec || ctx.loop == nullptr) {
    ctx.reply.Error("ERR the namespace must be looked up first: send this command outside EXEC");
    return false;
  }
  Session* session = &ctx.session;
  session->replay.assign(args.begin(), args.end());
  const OwedReply owed = OwedReply::Owe(ctx.client, /*blocking=*/true);
  start([session, owed](std::string_view error) {
    // Nothing is written when the client left (and its session with it).
    owed.Write([&](proto::ReplyWriter& out) {
      if (error.empty()) {
        session->replay_looked_up = true;  // the command runs again with the answer
      } else {
        session->replay.clear();
        out.Error(error);
      }
    });
  });
  return true;
}

// The entry a command may use: fresh, or whatever age when the command was just run again
// after its own lookup (so cache_seconds = 0 still makes progress).
const NamespaceEntry* Usable(CommandContext& ctx, const std::string& ns) {
  NamespaceDirectory& dir = ctx.loop->namespaces();
  const bool looked_up = std::exchange(ctx.session.replay_looked_up, false);
  return looked_up ? dir.Known(ns) : dir.Fresh(ns, ctx.loop->now_ms());
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
  Loop* loop = ctx.loop;
  return AwaitLookup(ctx, args, [loop, ns](NamespaceDirectory::Done done) {
    loop->namespaces().Refresh(ns, loop->now_ms(), std::move(done));
  });
}

namespace {

// AUTH <ns> <token> for a namespace other than "admin" (and "default" once its token was found
// to be one of default's).
AuthOutcome AuthenticateIn(CommandContext& ctx, Args args, const std::string& name,
                           std::string_view token) {
  Session& s = ctx.session;
  const bool looked_up = s.replay_looked_up;
  const NamespaceEntry* e = Usable(ctx, name);
  if (e == nullptr) {
    AwaitNamespace(ctx, args, name);
    return AuthOutcome::kAnswered;
  }
  NamespaceDirectory& dir = ctx.loop->namespaces();
  const int64_t now = ctx.loop->now_ms();
  std::string digest = DigestHex(token);
  if (!e->Accepts(digest)) {
    // A token created since the entry was cached works at once: a refusal from the cache is
    // confirmed by a fresh lookup first, unless a fresh lookup refused this very token lately
    // (a guess sent again costs no lookup).
    if (!looked_up && !dir.RecentlyRefused(name, digest, now)) {
      AwaitNamespace(ctx, args, name);
      return AuthOutcome::kAnswered;
    }
    if (looked_up) dir.NoteRefused(name, digest, now);
    return AuthOutcome::kWrongPass;
  }
  UnbindSession(s);
  s.authenticated = true;
  s.ns = name;
  s.token_digest = std::move(digest);
  s.auth_valid_until_ms = e->fetched_ms + dir.cache_ms();
  return AuthOutcome::kOk;
}

// User "default" under auth.required: the namespace the token belongs to (the owners index of
// namespace.lua), which then checks it as AUTH <ns> <token> would.
AuthOutcome AuthenticateByToken(CommandContext& ctx, Args args, std::string_view token) {
  Session& s = ctx.session;
  NamespaceDirectory& dir = ctx.loop->namespaces();
  const std::string digest = DigestHex(token);
  const TokenOwner* owner =
      s.replay_looked_up ? dir.KnownOwner(digest) : dir.FreshOwner(digest, ctx.loop->now_ms());
  if (owner == nullptr) {
    Loop* loop = ctx.loop;
    AwaitLookup(ctx, args, [loop, digest](NamespaceDirectory::Done done) {
      loop->namespaces().RefreshOwner(digest, loop->now_ms(), std::move(done));
    });
    return AuthOutcome::kAnswered;
  }
  if (owner->ns.empty()) {
    s.replay_looked_up = false;
    return AuthOutcome::kWrongPass;
  }
  return AuthenticateIn(ctx, args, std::string(owner->ns), token);
}

}  // namespace

AuthOutcome Authenticate(CommandContext& ctx, Args args, std::string_view ns,
                         std::string_view token) {
  Session& s = ctx.session;
  if (ns == "admin") {
    // Always checked, whether or not auth.required is set (docs/commands.md, errors and limits).
    if (!ctx.instance->CheckAdminPassword(token)) return AuthOutcome::kWrongPass;
    UnbindSession(s);
    s.authenticated = true;
    s.admin = true;
    s.ns = "admin";
    return AuthOutcome::kOk;
  }
  if (!ValidName(ns)) return AuthOutcome::kBadNamespace;
  if (ctx.loop == nullptr) return AuthOutcome::kWrongPass;
  if (!ctx.server.config().auth_required) {
    // Nothing is checked: the connection works in the namespace it names ("default" for a
    // one-argument AUTH), as before tokens existed.
    UnbindSession(s);
    s.authenticated = true;
    s.ns = std::string(ns);
    return AuthOutcome::kOk;
  }
  if (ns == "default") return AuthenticateByToken(ctx, args, token);
  return AuthenticateIn(ctx, args, std::string(ns), token);
}

void ReplyAuthFailure(CommandContext& ctx, AuthOutcome outcome, std::string_view user) {
  if (outcome == AuthOutcome::kBadNamespace) return ctx.reply.Error("ERR invalid namespace name");
  if (outcome != AuthOutcome::kWrongPass) return;
  // A wrong token or admin password: counted, logged (rate-limited per call site) and answered
  // late, more so the more this connection and its address have failed.
  Session& s = ctx.session;
  ++s.auth_failures;
  FailureCounter().Add();
  int64_t delay = 0;
  if (ctx.loop != nullptr) {
    delay = ctx.loop->auth_throttle().OnFailure(s.peer_ip, s.auth_failures, ctx.loop->now_ms());
  }
  DQ_LOG(kWarning,
         "AUTH failed: client id=%llu addr=%s user '%.*s' (%u failure(s) on this connection; "
         "reply delayed %lld ms)",
         static_cast<unsigned long long>(s.id), s.peer_ip.c_str(),
         static_cast<int>(std::min<size_t>(user.size(), 200)), user.data(), s.auth_failures,
         static_cast<long long>(delay));
  if (delay > 0 && ctx.client != nullptr && !ctx.in_exec) {
    const ReplyTicket ticket = ctx.client->Defer(/*blocking=*/true);
    ctx.loop->auth_throttle().Hold(ctx.client, ticket, ctx.loop->now_ms() + delay,
                                   std::string(kWrongPass));
    return;
  }
  ctx.reply.Error(kWrongPass);
}

uint64_t AuthFailures() { return FailureCounter().Read(); }

bool NamespaceGate(CommandContext& ctx, Args args) {
  if (ctx.loop == nullptr) return true;
  NamespaceDirectory& dir = ctx.loop->namespaces();
  if (!dir.needed()) return true;
  Session& s = ctx.session;
  if (s.admin && s.ns == "admin") return true;  // no namespace named yet: the parsers answer
  const bool check_token = ctx.server.config().auth_required && !s.admin;
  if (check_token && ctx.loop->now_ms() < s.auth_valid_until_ms) {
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
