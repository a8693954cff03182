// Connection commands (docs/commands.md, connection commands): PING, ECHO, QUIT, RESET, SELECT,
// HELLO, AUTH, CLIENT, TIME. They answer as Redis 7 does, byte for byte where a client could tell
// the difference.
#include <time.h>

#include <string>

#include "base/clock.h"
#include "config/build_info.h"
#include "config/queue_tag.h"
#include "queue/commands/auth.h"
#include "queue/commands/commands.h"
#include "queue/context/client_port.h"

namespace deferq::queue {

namespace {

// Redis's rule for CLIENT SETNAME: printable ASCII without spaces.
bool ValidClientName(std::string_view name) {
  for (unsigned char c : name) {
    if (c < '!' || c > '~') return false;
  }
  return true;
}

void ResetSession(Session& s) {
  s.resp = 2;
  s.name.clear();
  UnbindSession(s);
  s.multi.Clear();  // RESET also discards a transaction, as in Redis
  s.tracking = false;
}

void WriteClientList(proto::ReplyWriter& w, const ClientsReport& r) { w.Verbatim(r.list); }

// CLIENT LIST under auth.required (a namespace only ever sees its own: docs/commands.md, CLIENT):
// the admin lists every connection; a namespace connection lists the connections bound to its
// namespace; a connection that has not authenticated lists itself only (as CLIENT INFO).
ClientsQuery ClientListQuery(const CommandContext& ctx) {
  ClientsQuery query;
  const Session& s = ctx.session;
  if (!ctx.server.config().auth_required || s.admin) return query;
  if (s.authenticated) {
    query.filter.bound_ns = s.ns;
  } else {
    query.filter.id = s.id;
  }
  return query;
}

/* CLIENT KILL ip:port | CLIENT KILL <filter> <value> [<filter> <value> ...] with the filters
 * ID, ADDR, LADDR, USER, TYPE and SKIPME, as Redis 7. The old form answers +OK or "No such
 * client" and may kill the caller itself; the new form answers the number killed and skips the
 * caller unless SKIPME no. */
void ClientKill(CommandContext& ctx, Args args) {
  ClientsQuery query;
  query.kind = ClientsQuery::Kind::kKill;
  ClientsQuery::Filter& f = query.filter;
  if (args.size() == 3) {
    f.addr = std::string(args[2]);
    f.skip_me = false;
    return ReplyWithClients(ctx, std::move(query),
                            [](proto::ReplyWriter& w, const ClientsReport& r) {
                              if (r.killed == 0) return w.Error("ERR No such client");
                              w.Ok();
                            });
  }
  // Filters are taken in order, so the first bad one names the error, as in Redis.
  for (size_t i = 2; i < args.size(); i += 2) {
    if (i + 1 == args.size()) return ReplySyntaxError(ctx.reply);
    std::string_view name = args[i], value = args[i + 1];
    if (EqualsIgnoreCase(name, "id")) {
      int64_t id;
      if (!ParseInteger(value, &id) || id <= 0) {
        return ctx.reply.Error("ERR client-id should be greater than 0");
      }
      f.id = static_cast<uint64_t>(id);
    } else if (EqualsIgnoreCase(name, "addr")) {
      f.addr = std::string(value);
    } else if (EqualsIgnoreCase(name, "laddr")) {
      f.laddr = std::string(value);
    } else if (EqualsIgnoreCase(name, "user")) {
      f.user = std::string(value);
    } else if (EqualsIgnoreCase(name, "type")) {
      // Every deferq client is of type normal.
      if (EqualsIgnoreCase(value, "master") || EqualsIgnoreCase(value, "replica") ||
          EqualsIgnoreCase(value, "slave") || EqualsIgnoreCase(value, "pubsub")) {
        f.none = true;
      } else if (!EqualsIgnoreCase(value, "normal")) {
        std::string msg = "ERR Unknown client type '";
        msg.append(value);
        msg += "'";
        return ctx.reply.Error(msg);
      }
    } else if (EqualsIgnoreCase(name, "skipme")) {
      if (EqualsIgnoreCase(value, "yes")) {
        f.skip_me = true;
      } else if (EqualsIgnoreCase(value, "no")) {
        f.skip_me = false;
      } else {
        return ReplySyntaxError(ctx.reply);
      }
    } else {
      return ReplySyntaxError(ctx.reply);
    }
  }
  ReplyWithClients(ctx, std::move(query), [](proto::ReplyWriter& w, const ClientsReport& r) {
    w.Integer(static_cast<int64_t>(r.killed));
  });
}

}  // namespace

void ReplyWithClients(CommandContext& ctx, ClientsQuery query, ClientsReplyWriter write) {
  if (ctx.client == nullptr) return ctx.reply.Error("ERR client queries are not available here");
  const OwedReply owed = OwedReply::Owe(ctx.client, /*blocking=*/false);
  query.caller_id = ctx.session.id;
  ctx.server.QueryClients(std::move(query),
                          [owed, write = std::move(write)](const ClientsReport& report) {
                            if (!report.error.empty()) return owed.Error(report.error);
                            owed.Write([&](proto::ReplyWriter& w) { write(w, report); });
                          });
}

/* PING [message] */
void CmdPing(CommandContext& ctx, Args args) {
  if (args.size() > 2) return ReplyWrongArity(ctx.reply, "ping");
  if (args.size() == 1) return ctx.reply.Simple("PONG");
  ctx.reply.Bulk(args[1]);
}

/* ECHO message */
void CmdEcho(CommandContext& ctx, Args args) { ctx.reply.Bulk(args[1]); }

/* QUIT: answered +OK, then the connection closes once everything owed is written. */
void CmdQuit(CommandContext& ctx, Args) {
  ctx.session.close_after_reply = true;
  ctx.reply.Ok();
}

/* RESET: back to RESP2, no name, namespace default, not authenticated, no transaction. */
void CmdReset(CommandContext& ctx, Args) {
  ResetSession(ctx.session);
  ctx.reply.set_resp(2);
  ctx.reply.Simple("RESET");
}

/* SELECT index: deferq has one logical database, 0. */
void CmdSelect(CommandContext& ctx, Args args) {
  int64_t index;
  if (!ParseInteger(args[1], &index) || index < INT32_MIN || index > INT32_MAX) {
    return ctx.reply.Error("ERR value is not an integer or out of range");
  }
  if (index != 0) return ctx.reply.Error("ERR DB index is out of range");
  ctx.reply.Ok();
}

/* HELLO [protover [AUTH username password] [SETNAME clientname]] */
void CmdHello(CommandContext& ctx, Args args) {
  int64_t ver = ctx.session.resp;
  size_t i = 1;
  if (args.size() >= 2) {
    if (!ParseInteger(args[1], &ver)) {
      return ctx.reply.Error("ERR Protocol version is not an integer or out of range");
    }
    if (ver < 2 || ver > 3) return ctx.reply.Error("NOPROTO unsupported protocol version");
    i = 2;
  }
  std::string_view user, pass, setname;
  bool has_auth = false, has_name = false;
  for (; i < args.size(); ++i) {
    const size_t more = args.size() - i - 1;
    if (EqualsIgnoreCase(args[i], "auth") && more >= 2) {
      user = args[i + 1];
      pass = args[i + 2];
      has_auth = true;
      i += 2;
    } else if (EqualsIgnoreCase(args[i], "setname") && more >= 1) {
      setname = args[i + 1];
      has_name = true;
      i += 1;
    } else {
      std::string msg = "ERR Syntax error in HELLO option '";
      msg.append(args[i]);
      msg += "'";
      return ctx.reply.Error(msg);
    }
  }
  if (has_name && !ValidClientName(setname)) {
    return ctx.reply.Error(
        "ERR Client names cannot contain spaces, newlines or special characters.");
  }
  if (has_auth) {
    // May wait for the namespace's lookup: HELLO then runs again, before anything changed.
    AuthOutcome r = Authenticate(ctx, args, user, pass);
    if (r != AuthOutcome::kOk) return ReplyAuthFailure(ctx, r, user);
  }
  if (has_name) ctx.session.name = std::string(setname);
  ctx.session.resp = static_cast<int>(ver);
  ctx.reply.set_resp(ctx.session.resp);

  ctx.reply.MapHeader(7);
  ctx.reply.Bulk("server");
  ctx.reply.Bulk("deferq");
  ctx.reply.Bulk("version");
  ctx.reply.Bulk(kVersion);
  ctx.reply.Bulk("proto");
  ctx.reply.Integer(ver);
  ctx.reply.Bulk("id");
  ctx.reply.Integer(static_cast<int64_t>(ctx.session.id));
  ctx.reply.Bulk("mode");
  ctx.reply.Bulk("standalone");
  ctx.reply.Bulk("role");
  ctx.reply.Bulk("master");
  ctx.reply.Bulk("modules");
  ctx.reply.ArrayHeader(0);
}

/* AUTH [namespace] token */
void CmdAuth(CommandContext& ctx, Args args) {
  if (args.size() > 3) return ReplySyntaxError(ctx.reply);
  std::string_view ns = args.size() == 3 ? args[1] : std::string_view("default");
  std::string_view token = args.back();
  AuthOutcome r = Authenticate(ctx, args, ns, token);
  if (r != AuthOutcome::kOk) return ReplyAuthFailure(ctx, r, ns);
  ctx.reply.Ok();
}

/* CLIENT SETNAME name | GETNAME | ID | INFO | LIST | KILL ... | SETINFO attr value | HELP */
void CmdClient(CommandContext& ctx, Args args) {
  std::string_view sub = args[1];
  auto arity = [&](size_t n, const char* name) {
    if (args.size() == n) return true;
    ReplyWrongArity(ctx.reply, name);
    return false;
  };
  if (EqualsIgnoreCase(sub, "setname")) {
    if (!arity(3, "client|setname")) return;
    if (!ValidClientName(args[2])) {
      return ctx.reply.Error(
          "ERR Client names cannot contain spaces, newlines or special characters.");
    }
    ctx.session.name = std::string(args[2]);
    return ctx.reply.Ok();
  }
  if (EqualsIgnoreCase(sub, "getname")) {
    if (!arity(2, "client|getname")) return;
    if (ctx.session.name.empty()) return ctx.reply.Null();
    return ctx.reply.Bulk(ctx.session.name);
  }
  if (EqualsIgnoreCase(sub, "id")) {
    if (!arity(2, "client|id")) return;
    return ctx.reply.Integer(static_cast<int64_t>(ctx.session.id));
  }
  if (EqualsIgnoreCase(sub, "info")) {
    if (!arity(2, "client|info")) return;
    return ctx.reply.Verbatim(ctx.server.DescribeClient(ctx.session) + "\n");
  }
  if (EqualsIgnoreCase(sub, "list")) {
    // CLIENT LIST [TYPE normal]: every deferq client is of type normal.
    if (args.size() == 4 && EqualsIgnoreCase(args[2], "type")) {
      if (EqualsIgnoreCase(args[3], "normal")) {
        return ReplyWithClients(ctx, ClientListQuery(ctx), WriteClientList);
      }
      if (EqualsIgnoreCase(args[3], "master") || EqualsIgnoreCase(args[3], "replica") ||
          EqualsIgnoreCase(args[3], "pubsub")) {
        return ctx.reply.Verbatim("");
      }
      std::string msg = "ERR Unknown client type '";
      msg.append(args[3]);
      msg += "'";
      return ctx.reply.Error(msg);
    }
    if (args.size() != 2) return ReplySyntaxError(ctx.reply);
    return ReplyWithClients(ctx, ClientListQuery(ctx), WriteClientList);
  }
  if (EqualsIgnoreCase(sub, "kill")) {
    if (args.size() < 3) return ReplyWrongArity(ctx.reply, "client|kill");
    // With namespaces enforced, only the admin may close other namespaces' connections.
    if (ctx.server.config().auth_required && !ctx.session.admin) {
      return ctx.reply.Error(
          "NOPERM this user has no permissions to run the 'client|kill' command");
    }
    return ClientKill(ctx, args);
  }
  if (EqualsIgnoreCase(sub, "setinfo")) {
    // Sent by newer client libraries on connect (lib-name, lib-ver); accepted and ignored.
    if (!arity(4, "client|setinfo")) return;
    if (!EqualsIgnoreCase(args[2], "lib-name") && !EqualsIgnoreCase(args[2], "lib-ver")) {
      std::string msg = "ERR Unrecognized option '";
      msg.append(args[2]);
      msg += "'";
      return ctx.reply.Error(msg);
    }
    return ctx.reply.Ok();
  }
  if (EqualsIgnoreCase(sub, "tracking")) {
    // Client-side caching (node-redis clientSideCache sends CLIENT TRACKING ON on connect):
    // deferq has no keys a client could cache, so tracking is accepted and never invalidates
    // anything, as Redis would answer for a keyspace nobody reads.
    if (args.size() < 3) return ReplyWrongArity(ctx.reply, "client|tracking");
    const bool on = EqualsIgnoreCase(args[2], "on");
    if (!on && !EqualsIgnoreCase(args[2], "off")) return ReplySyntaxError(ctx.reply);
    for (size_t i = 3; i < args.size(); ++i) {
      if (EqualsIgnoreCase(args[i], "redirect") || EqualsIgnoreCase(args[i], "prefix")) {
        if (++i >= args.size()) return ReplySyntaxError(ctx.reply);
      } else if (!EqualsIgnoreCase(args[i], "bcast") && !EqualsIgnoreCase(args[i], "optin") &&
                 !EqualsIgnoreCase(args[i], "optout") && !EqualsIgnoreCase(args[i], "noloop")) {
        return ReplySyntaxError(ctx.reply);
      }
    }
    ctx.session.tracking = on;
    return ctx.reply.Ok();
  }
  if (EqualsIgnoreCase(sub, "caching")) {
    if (!arity(3, "client|caching")) return;
    if (!EqualsIgnoreCase(args[2], "yes") && !EqualsIgnoreCase(args[2], "no")) {
      return ReplySyntaxError(ctx.reply);
    }
    return ctx.reply.Ok();
  }
  if (EqualsIgnoreCase(sub, "getredirect")) {
    if (!arity(2, "client|getredirect")) return;
    return ctx.reply.Integer(ctx.session.tracking ? 0 : -1);
  }
  if (EqualsIgnoreCase(sub, "trackinginfo")) {
    if (!arity(2, "client|trackinginfo")) return;
    ctx.reply.MapHeader(3);
    ctx.reply.Bulk("flags");
    ctx.reply.ArrayHeader(1);
    ctx.reply.Bulk(ctx.session.tracking ? "on" : "off");
    ctx.reply.Bulk("redirect");
    ctx.reply.Integer(ctx.session.tracking ? 0 : -1);
    ctx.reply.Bulk("prefixes");
    ctx.reply.ArrayHeader(0);
    return;
  }
  if (EqualsIgnoreCase(sub, "help")) {
    static const char* const kHelp[] = {
        "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GETNAME",
        "    Return the name of the current connection.",
        "ID",
        "    Return the ID of the current connection.",
        "INFO",
        "    Return information about the current client connection.",
        "KILL <ip:port>",
        "    Kill connection made from <ip:port>.",
        "KILL <option> <value> [<option> <value> [...]]",
        "    Kill connections. Options are:",
        "    * ADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made from the specified address",
        "    * LADDR (<ip:port>|<unixsocket>:0)",
        "      Kill connections made to specified local address",
        "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
        "      Kill connections by type.",
        "    * USER <username>",
        "      Kill connections authenticated by <username> (deferq: bound to namespace).",
        "    * ID <client-id>",
        "      Kill connections by client id.",
        "    * SKIPME (YES|NO)",
        "      Skip killing current connection (default: yes).",
        "LIST [TYPE normal]",
        "    Return information about client connections.",
        "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]] [OPTIN] [OPTOUT]",
        "    Accepted: deferq has nothing a client could cache, so nothing is invalidated.",
        "CACHING (YES|NO), GETREDIRECT, TRACKINGINFO",
        "    Accepted, for client-side caching libraries.",
        "SETNAME <name>",
        "    Assign the name <name> to the current connection.",
        "HELP",
        "    Print this help.",
    };
    return ReplyHelp(ctx.reply, kHelp);
  }
  std::string msg = "ERR unknown subcommand '";
  msg.append(sub.substr(0, 128));
  msg += "'. Try CLIENT HELP.";
  ctx.reply.Error(msg);
}

/* TIME: [unix seconds, microseconds] as bulk strings. */
void CmdTime(CommandContext& ctx, Args) {
  const int64_t now_us = base::RealtimeUs();
  ctx.reply.ArrayHeader(2);
  ctx.reply.Bulk(std::to_string(now_us / 1000000));
  ctx.reply.Bulk(std::to_string(now_us % 1000000));
}

}  // namespace deferq::queue
