// Admin commands (docs/commands.md, admin commands): NAMESPACE, TOKEN, POOL. Every one needs an
// admin connection (RequireAdmin, queue/commands/auth.h). Namespace and token metadata live in pool
// "default" and each change is one call of namespace.lua (docs/storage.md "Namespaces and tokens");
// a namespace's queues live in the pool it was created on.

#include <algorithm>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/ascii.h"
#include "config/queue_tag.h"
#include "queue/commands/auth.h"
#include "queue/context/client_port.h"
#include "queue/context/loop.h"
#include "queue/model/job_codec.h"
#include "queue/model/queue_name.h"
#include "queue/model/shards.h"
#include "queue/stats/queue_stats.h"
#include "queue/tenancy/rate_limiter.h"
#include "queue/tenancy/tokens.h"

namespace deferq::queue {

namespace {

constexpr size_t kMaxDescription = 1024;

using MetaReply = std::function<void(proto::ReplyWriter&, persist::ReplyView)>;

bool NeedWorker(CommandContext& ctx) {
  if (ctx.loop != nullptr && ctx.client != nullptr) return true;
  ctx.reply.Error("ERR admin commands are not available here");
  return false;
}

// The text of an upstream failure or of an error reply; "" when `r` is a usable reply.
using persist::FailureOf;

// One namespace.lua call on the metadata pool, answered through `write` (errors as they come).
void MetaCall(CommandContext& ctx, std::vector<std::string> argv, MetaReply write) {
  persist::PoolClient* meta = ctx.loop->namespaces().MetadataPool();
  if (meta == nullptr) return ctx.reply.Error("ERR no pool 'default' holds the namespaces");
  const OwedReply owed = OwedReply::Owe(ctx.client, /*blocking=*/false);
  const std::string_view keys[] = {kAuthPrefix};
  std::vector<std::string_view> args(argv.begin(), argv.end());
  // The reads go to the no-writes registration: they answer at maxmemory and under MISCONF.
  const std::string_view op = argv.empty() ? std::string_view() : std::string_view(argv[0]);
  const bool read = op == "list" || op == "info" || op == "token_list" || op == "lookup";
  meta->Eval(read ? persist::Script::kNamespaceRead : persist::Script::kNamespace, keys, args,
             ctx.session.id, [owed, write = std::move(write)](const persist::UpstreamResult& r) {
               owed.Write([&](proto::ReplyWriter& out) { WriteUpstreamReply(out, r, write); });
             });
}

// The queues of `ns` that hold a job, from the registry of the pool it lives in.
using QueuesDone = std::function<void(std::string_view error, std::vector<std::string> queues)>;
void QueuesOf(persist::PoolClient* pool, const std::string& ns, uint64_t affinity,
              QueuesDone done) {
  pool->ReadRegistry(affinity, [ns, done = std::move(done)](persist::RegistryRead& r) {
    if (!r.error.empty()) return done(r.error, {});
    std::vector<std::string> queues;
    for (const std::string& tag : r.tags) {
      std::string_view tag_ns, queue;
      if (QueueName::Split(tag, &tag_ns, &queue) && tag_ns == ns) queues.emplace_back(queue);
    }
    std::sort(queues.begin(), queues.end());
    done({}, std::move(queues));
  });
}

// The queues of `ns` that hold nothing but their retained counters: in the due index (whose entry
// is when their retention ends, docs/storage.md "Retention"), not in the registry.
void RetainedQueuesOf(persist::PoolClient* pool, const std::string& ns, uint64_t affinity,
                      QueuesDone done) {
  pool->ReadDue(-1, 0, affinity, [ns, done = std::move(done)](persist::DueRead& r) {
    if (!r.error.empty()) return done(r.error, {});
    std::vector<std::string> queues;
    for (const auto& [tag, due] : r.entries) {
      std::string_view tag_ns, queue;
      if (QueueName::Split(tag, &tag_ns, &queue) && tag_ns == ns) queues.emplace_back(queue);
    }
    done({}, std::move(queues));
  });
}

// Everything of a deleted namespace in Redis: each queue purged whole ("drop": its pause mark
// too), its limits (in pool default), its entries in the metrics index. `answer` gets the first
// error, or "" when all is gone.
void DropNamespaceData(Loop* loop, persist::PoolClient* meta, persist::PoolClient* home,
                       const std::string& ns, std::vector<std::string> queues, uint64_t affinity,
                       std::function<void(std::string_view)> answer) {
  std::sort(queues.begin(), queues.end());
  queues.erase(std::unique(queues.begin(), queues.end()), queues.end());
  auto left = std::make_shared<size_t>(queues.size() + (queues.empty() ? 1 : 2));
  auto error = std::make_shared<std::string>();
  auto one_done = [left, error, answer](const persist::UpstreamResult& r) {
    if (std::string e = FailureOf(r); !e.empty() && error->empty()) *error = e;
    if (--*left == 0) answer(*error);
  };
  const std::string now = std::to_string(loop->wall_ms());
  std::vector<std::string> tags;
  for (const std::string& q : queues) {
    const QueueName name{ns, q};
    tags.push_back(name.tag());
    const std::string prefix = name.prefix();
    const std::string_view qkeys[] = {prefix};
    const std::string_view qargs[] = {now, "drop"};
    home->Eval(persist::Script::kPurge, qkeys, qargs, affinity, one_done);
  }
  const std::string limit = LimitKey(ns);
  const std::string_view del_limit[] = {"DEL", limit};
  meta->Command(del_limit, affinity, one_done);
  if (tags.empty()) return;
  std::vector<std::string_view> zrem = {"ZREM", kActiveQueuesKey};
  for (const std::string& t : tags) zrem.push_back(t);
  home->Command(zrem, affinity, one_done);
}

std::string Str(persist::ReplyView r) {
  return r != nullptr && r.is_string() ? std::string(r.str()) : std::string();
}

bool ValidNewNamespace(CommandContext& ctx, std::string_view ns) {
  if (ValidName(ns) && ns != "admin") return true;
  ctx.reply.Error("ERR invalid namespace name");
  return false;
}

// Options "[KEYWORD value]..." from args[from]: each keyword at most once.
bool ParseOptions(CommandContext& ctx, Args args, size_t from,
                  std::initializer_list<std::pair<std::string_view, std::string*>> options) {
  std::vector<bool> seen(options.size(), false);
  for (size_t i = from; i < args.size(); i += 2) {
    if (i + 1 >= args.size()) {
      ReplySyntaxError(ctx.reply);
      return false;
    }
    size_t k = 0;
    for (const auto& [name, out] : options) {
      if (EqualsIgnoreCase(args[i], name) && !seen[k]) {
        seen[k] = true;
        *out = std::string(args[i + 1]);
        break;
      }
      ++k;
    }
    if (k == options.size()) {
      ReplySyntaxError(ctx.reply);
      return false;
    }
  }
  return true;
}

/* NAMESPACE CREATE ns [POOL p] [DESCRIPTION text] */
void NamespaceCreate(CommandContext& ctx, Args args) {
  if (!ValidNewNamespace(ctx, args[2])) return;
  std::string pool = "default", description;
  if (!ParseOptions(ctx, args, 3, {{"pool", &pool}, {"description", &description}})) return;
  if (description.size() > kMaxDescription) return ctx.reply.Error("ERR description too long");
  if (ctx.loop->namespaces().PoolNamed(pool) == nullptr) {
    return ctx.reply.Error("ERR no such pool '" + pool + "'");
  }
  const std::string ns(args[2]);
  ctx.loop->namespaces().Forget(ns);
  MetaCall(ctx, {"create", ns, pool, description, std::to_string(ctx.loop->wall_ms())},
           [](proto::ReplyWriter& w, persist::ReplyView) { w.Ok(); });
}

/* NAMESPACE LIST: the namespaces' names, sorted. */
void NamespaceList(CommandContext& ctx) {
  MetaCall(ctx, {"list", ""}, [](proto::ReplyWriter& w, persist::ReplyView r) {
    std::vector<std::string> names;
    for (size_t i = 0; r.is_array() && i + 1 < r.size(); i += 2) {
      names.push_back(Str(r[i]));
    }
    std::sort(names.begin(), names.end());
    w.ArrayHeader(names.size());
    for (const std::string& n : names) w.Bulk(n);
  });
}

/* NAMESPACE INFO ns: name, pool, description, created_ms, tokens, queues (holding jobs). */
void NamespaceInfo(CommandContext& ctx, Args args) {
  if (!ValidName(args[2])) return ctx.reply.Error("ERR invalid namespace name");
  const std::string ns(args[2]);
  persist::PoolClient* meta = ctx.loop->namespaces().MetadataPool();
  if (meta == nullptr) return ctx.reply.Error("ERR no pool 'default' holds the namespaces");
  const OwedReply owed = OwedReply::Owe(ctx.client, /*blocking=*/false);
  NamespaceDirectory* dir = &ctx.loop->namespaces();
  const uint64_t affinity = ctx.session.id;
  const std::string_view keys[] = {kAuthPrefix};
  const std::string_view argv[] = {"info", ns};
  auto fail = [owed](std::string_view e) { owed.Error(e); };
  meta->Eval(
      persist::Script::kNamespaceRead, keys, argv, affinity, [=](const persist::UpstreamResult& r) {
        if (std::string e = FailureOf(r); !e.empty()) return fail(e);
        if (!r.view().is_array() || r.view().size() != 4) {
          return fail("ERR no such namespace");
        }
        const std::string pool = Str(r.view()[0]);
        const std::string desc = Str(r.view()[1]);
        int64_t created = 0, tokens = 0;
        r.view()[2].Int(&created);
        r.view()[3].Int(&tokens);
        persist::PoolClient* home = dir->PoolNamed(pool);
        auto write = [=](int64_t queues) {
          owed.Write([&](proto::ReplyWriter& out) {
            out.MapHeader(6);
            out.Bulk("name");
            out.Bulk(ns);
            out.Bulk("pool");
            out.Bulk(pool);
            out.Bulk("description");
            out.Bulk(desc);
            out.Bulk("created_ms");
            out.Integer(created);
            out.Bulk("tokens");
            out.Integer(tokens);
            out.Bulk("queues");
            out.Integer(queues);
          });
        };
        // A pool this instance does not know: its queues cannot be counted here.
        if (home == nullptr) return write(-1);
        QueuesOf(home, ns, affinity, [=](std::string_view e, std::vector<std::string> queues) {
          if (!e.empty()) return fail(e);
          for (std::string& q : queues) q = std::string(ClientQueueName(q));  // shards: once
          write(std::unique(queues.begin(), queues.end()) - queues.begin());
        });
      });
}

/* NAMESPACE DELETE ns [FORCE]: refused while any of its queues holds a job or is paused, unless
 * FORCE. Deletes everything of the namespace: its metadata and tokens (they stop working), every
 * queue (jobs, counters, pause marks; those that hold nothing but retained counters too), its
 * limits, its entries in the metrics index. A namespace created again with that name starts
 * empty. */
void NamespaceDelete(CommandContext& ctx, Args args) {
  if (!ValidName(args[2])) return ctx.reply.Error("ERR invalid namespace name");
  bool force = false;
  if (args.size() == 4) {
    if (!EqualsIgnoreCase(args[3], "force")) return ReplySyntaxError(ctx.reply);
    force = true;
  } else if (args.size() > 4) {
    return ReplySyntaxError(ctx.reply);
  }
  const std::string ns(args[2]);
  persist::PoolClient* meta = ctx.loop->namespaces().MetadataPool();
  if (meta == nullptr) return ctx.reply.Error("ERR no pool 'default' holds the namespaces");
  const OwedReply owed = OwedReply::Owe(ctx.client, /*blocking=*/false);
  NamespaceDirectory* dir = &ctx.loop->namespaces();
  Loop* loop = ctx.loop;
  const uint64_t affinity = ctx.session.id;
  auto answer = [owed](std::string_view error) {
    if (!error.empty()) return owed.Error(error);
    owed.Write([](proto::ReplyWriter& out) { out.Ok(); });
  };
  const std::string_view keys[] = {kAuthPrefix};
  const std::string_view info[] = {"info", ns};
  meta->Eval(
      persist::Script::kNamespaceRead, keys, info, affinity, [=](const persist::UpstreamResult& r) {
        if (std::string e = FailureOf(r); !e.empty()) return answer(e);
        if (!r.view().is_array() || r.view().size() != 4) {
          return answer("ERR no such namespace");
        }
        persist::PoolClient* home = dir->PoolNamed(Str(r.view()[0]));
        if (home == nullptr) return answer("ERR the namespace's pool is not configured here");
        QueuesOf(home, ns, affinity, [=](std::string_view e, std::vector<std::string> listed) {
          if (!e.empty()) return answer(e);
          if (!listed.empty() && !force) {
            return answer("ERR namespace has jobs in " + std::to_string(listed.size()) +
                          " queue(s) (or paused queues); drain them first, or NAMESPACE DELETE " +
                          ns + " FORCE");
          }
          RetainedQueuesOf(
              home, ns, affinity, [=](std::string_view e2, std::vector<std::string> retained) {
                if (!e2.empty()) return answer(e2);
                const std::string_view del[] = {"delete", ns};
                const std::string_view meta_keys[] = {kAuthPrefix};
                meta->Eval(persist::Script::kNamespace, meta_keys, del, affinity,
                           [=](const persist::UpstreamResult& d) {
                             if (std::string e3 = FailureOf(d); !e3.empty()) return answer(e3);
                             dir->Forget(ns);
                             loop->rate_limiter().Invalidate(ns);
                             std::vector<std::string> queues = listed;
                             queues.insert(queues.end(), retained.begin(), retained.end());
                             DropNamespaceData(loop, meta, home, ns, std::move(queues), affinity,
                                               answer);
                           });
              });
        });
      });
}

/* NAMESPACE USE ns: the admin connection's job commands work in `ns` from now on. */
void NamespaceUse(CommandContext& ctx, Args args) {
  if (!ValidNewNamespace(ctx, args[2])) return;
  const std::string ns(args[2]);
  if (ctx.server.config().auth_required || ctx.loop->namespaces().needed()) {
    // The namespace must exist (auth.required), and its pool be known (several pools).
    const bool looked_up = std::exchange(ctx.session.replay_looked_up, false);
    NamespaceDirectory& dir = ctx.loop->namespaces();
    const NamespaceEntry* e = looked_up ? dir.Known(ns) : dir.Fresh(ns, ctx.loop->now_ms());
    if (e == nullptr) {
      AwaitNamespace(ctx, args, ns);
      return;
    }
    if (!e->exists && ctx.server.config().auth_required) {
      return ctx.reply.Error("ERR no such namespace");
    }
  }
  ctx.session.ns = ns;
  ctx.reply.Ok();
}

// The start of NAMESPACE, TOKEN and POOL: HELP answers anyone; any other subcommand needs an
// admin connection. Returns "command|subcommand" (lower case, for error texts), or "" once an
// answer was written.
std::string AdminSubcommand(CommandContext& ctx, Args args, std::string_view command,
                            std::span<const char* const> help) {
  if (EqualsIgnoreCase(args[1], "help")) {
    ReplyHelp(ctx.reply, help);
    return {};
  }
  std::string name(command);
  name += '|';
  name += base::AsciiLower(args[1].substr(0, 32));
  if (!RequireAdmin(ctx, name) || !NeedWorker(ctx)) return {};
  return name;
}

void ReplyUnknownSubcommand(CommandContext& ctx, std::string_view sub, std::string_view upper) {
  ctx.reply.Error("ERR unknown subcommand '" + std::string(sub.substr(0, 128)) + "'. Try " +
                  std::string(upper) + " HELP.");
}

}  // namespace

/* NAMESPACE CREATE ns [POOL p] [DESCRIPTION text] | LIST | INFO ns | DELETE ns [FORCE] | USE ns
 *           | HELP */
void CmdNamespace(CommandContext& ctx, Args args) {
  static const char* const kHelp[] = {
      "NAMESPACE <subcommand> [<arg> ...]. Subcommands are (admin connection only):",
      "CREATE <namespace> [POOL <pool>] [DESCRIPTION <text>]",
      "    Create a namespace whose queues live in <pool> (default: default).",
      "LIST",
      "    Return the names of every namespace.",
      "INFO <namespace>",
      "    Return its pool, description, creation time, token and queue counts.",
      "DELETE <namespace> [FORCE]",
      "    Delete it (refused while it has jobs, unless FORCE, which purges them).",
      "USE <namespace>",
      "    Run this connection's job commands in <namespace>.",
      "HELP",
      "    Print this help.",
  };
  const std::string name = AdminSubcommand(ctx, args, "namespace", kHelp);
  if (name.empty()) return;
  std::string_view sub = args[1];
  auto arity = [&](size_t min, size_t max) {
    if (args.size() >= min && args.size() <= max) return true;
    ReplyWrongArity(ctx.reply, name);
    return false;
  };
  if (EqualsIgnoreCase(sub, "create")) {
    if (arity(3, 7)) NamespaceCreate(ctx, args);
  } else if (EqualsIgnoreCase(sub, "list")) {
    if (arity(2, 2)) NamespaceList(ctx);
  } else if (EqualsIgnoreCase(sub, "info")) {
    if (arity(3, 3)) NamespaceInfo(ctx, args);
  } else if (EqualsIgnoreCase(sub, "delete")) {
    if (arity(3, 4)) NamespaceDelete(ctx, args);
  } else if (EqualsIgnoreCase(sub, "use")) {
    if (arity(3, 3)) NamespaceUse(ctx, args);
  } else {
    ReplyUnknownSubcommand(ctx, sub, "NAMESPACE");
  }
}

/* TOKEN CREATE ns [DESCRIPTION text] | LIST ns | REVOKE ns token-or-id | HELP */
void CmdToken(CommandContext& ctx, Args args) {
  static const char* const kHelp[] = {
      "TOKEN <subcommand> <namespace> [<arg> ...]. Subcommands are (admin connection only):",
      "CREATE <namespace> [DESCRIPTION <text>]",
      "    Create a token (shown once; only its SHA-256 digest is stored).",
      "LIST <namespace>",
      "    Return each token's id, creation time and description (never the token).",
      "REVOKE <namespace> <token or id>",
      "    Revoke a token; every instance refuses it within auth.cache_seconds.",
      "HELP",
      "    Print this help.",
  };
  const std::string name = AdminSubcommand(ctx, args, "token", kHelp);
  if (name.empty()) return;
  std::string_view sub = args[1];
  if (args.size() < 3) return ReplyWrongArity(ctx.reply, name);
  if (!ValidName(args[2])) return ctx.reply.Error("ERR invalid namespace name");
  const std::string ns(args[2]);
  if (EqualsIgnoreCase(sub, "create")) {
    std::string description;
    if (!ParseOptions(ctx, args, 3, {{"description", &description}})) return;
    if (description.size() > kMaxDescription) return ctx.reply.Error("ERR description too long");
    std::string token = NewToken();
    if (token.empty()) return ctx.reply.Error("ERR the random generator failed; try again");
    ctx.loop->namespaces().Forget(ns);
    std::string digest = DigestHex(token);  // before `token` moves into the reply
    MetaCall(
        ctx, {"token_add", ns, std::move(digest), description, std::to_string(ctx.loop->wall_ms())},
        [token = std::move(token)](proto::ReplyWriter& w, persist::ReplyView) { w.Bulk(token); });
  } else if (EqualsIgnoreCase(sub, "list")) {
    if (args.size() != 3) return ReplyWrongArity(ctx.reply, "token|list");
    MetaCall(ctx, {"token_list", ns}, [](proto::ReplyWriter& w, persist::ReplyView r) {
      const size_t n = r.is_array() ? r.size() / 3 : 0;
      w.ArrayHeader(n);
      for (size_t i = 0; i < n; ++i) {
        int64_t created = 0;
        r[3 * i + 1].Int(&created);
        w.MapHeader(3);
        w.Bulk("id");
        w.Bulk(Str(r[3 * i]));
        w.Bulk("created_ms");
        w.Integer(created);
        w.Bulk("description");
        w.Bulk(Str(r[3 * i + 2]));
      }
    });
  } else if (EqualsIgnoreCase(sub, "revoke")) {
    if (args.size() != 4) return ReplyWrongArity(ctx.reply, "token|revoke");
    std::string_view which = args[3];
    // A token's id (TOKEN LIST) names it as well as the token itself: a lost token can be
    // revoked too.
    const bool is_id = which.size() == kTokenIdLength &&
                       which.find_first_not_of("0123456789abcdef") == std::string_view::npos;
    ctx.loop->namespaces().Forget(ns);
    MetaCall(ctx, {"token_revoke", ns, is_id ? std::string(which) : DigestHex(which)},
             [](proto::ReplyWriter& w, persist::ReplyView r) {
               int64_t n = 0;
               r.Int(&n);
               if (n > 0) return w.Ok();
               w.Error("ERR no such token");
             });
  } else {
    ReplyUnknownSubcommand(ctx, sub, "TOKEN");
  }
}

/* POOL LIST | INFO pool | HELP */
void CmdPool(CommandContext& ctx, Args args) {
  static const char* const kHelp[] = {
      "POOL <subcommand> [<arg> ...]. Subcommands are (admin connection only):",
      "LIST",
      "    Return the names of the configured pools.",
      "INFO <pool>",
      "    Return its address, state, connections, latency and namespace count.",
      "HELP",
      "    Print this help.",
  };
  const std::string name = AdminSubcommand(ctx, args, "pool", kHelp);
  if (name.empty()) return;
  std::string_view sub = args[1];
  if (EqualsIgnoreCase(sub, "list")) {
    if (args.size() != 2) return ReplyWrongArity(ctx.reply, "pool|list");
    const auto& pools = ctx.server.config().pools;
    ctx.reply.ArrayHeader(pools.size());
    for (const PoolConfig& p : pools) ctx.reply.Bulk(p.name);
    return;
  }
  if (!EqualsIgnoreCase(sub, "info")) {
    return ReplyUnknownSubcommand(ctx, sub, "POOL");
  }
  if (args.size() != 3) return ReplyWrongArity(ctx.reply, "pool|info");
  PoolSnapshot snap;
  bool found = false;
  for (PoolSnapshot& p : ctx.server.Pools()) {
    if (p.name == args[2]) {
      snap = std::move(p);
      found = true;
    }
  }
  if (!found) return ctx.reply.Error("ERR no such pool '" + std::string(args[2]) + "'");
  MetaCall(ctx, {"list", ""}, [snap](proto::ReplyWriter& w, persist::ReplyView r) {
    int64_t namespaces = 0;
    for (size_t i = 1; r.is_array() && i < r.size(); i += 2) {
      namespaces += Str(r[i]) == snap.name;
    }
    const char* state = snap.refused ? "refused" : snap.connections_up > 0 ? "up" : "down";
    w.MapHeader(9);
    w.Bulk("name");
    w.Bulk(snap.name);
    w.Bulk("addr");
    w.Bulk(snap.addr);
    w.Bulk("state");
    w.Bulk(state);
    w.Bulk("connections_up");
    w.Integer(snap.connections_up);
    w.Bulk("connections");
    w.Integer(snap.connections);
    w.Bulk("inflight");
    w.Integer(snap.inflight);
    w.Bulk("latency_us");
    w.Integer(snap.latency_us);
    w.Bulk("requests");
    w.Integer(static_cast<int64_t>(snap.requests));
    w.Bulk("namespaces");
    w.Integer(namespaces);
  });
}

}  // namespace deferq::queue
