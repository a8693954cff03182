#include "queue/commands.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "queue/auth.h"
#include "queue/transaction.h"

namespace deferq::queue {

// Handlers live in their own files, grouped by topic; the table below is the only place that
// names them all.
void CmdPing(CommandContext& ctx, Args args);
void CmdEcho(CommandContext& ctx, Args args);
void CmdQuit(CommandContext& ctx, Args args);
void CmdReset(CommandContext& ctx, Args args);
void CmdSelect(CommandContext& ctx, Args args);
void CmdHello(CommandContext& ctx, Args args);
void CmdAuth(CommandContext& ctx, Args args);
void CmdClient(CommandContext& ctx, Args args);
void CmdCommand(CommandContext& ctx, Args args);
void CmdInfo(CommandContext& ctx, Args args);
void CmdTime(CommandContext& ctx, Args args);
void CmdPublish(CommandContext& ctx, Args args);
void CmdConsume(CommandContext& ctx, Args args);
void CmdAck(CommandContext& ctx, Args args);
void CmdNack(CommandContext& ctx, Args args);
void CmdTouch(CommandContext& ctx, Args args);
void CmdCancel(CommandContext& ctx, Args args);
void CmdJob(CommandContext& ctx, Args args);
void CmdPeek(CommandContext& ctx, Args args);
void CmdQstat(CommandContext& ctx, Args args);
void CmdQueues(CommandContext& ctx, Args args);
void CmdPurge(CommandContext& ctx, Args args);
void CmdDeadletter(CommandContext& ctx, Args args);
void CmdNamespace(CommandContext& ctx, Args args);
void CmdToken(CommandContext& ctx, Args args);
void CmdPool(CommandContext& ctx, Args args);
void CmdQpause(CommandContext& ctx, Args args);
void CmdQresume(CommandContext& ctx, Args args);
void CmdLimit(CommandContext& ctx, Args args);
bool CheckPublish(CommandContext& ctx, Args args);
bool CheckConsume(CommandContext& ctx, Args args);
bool CheckAck(CommandContext& ctx, Args args);
bool CheckNack(CommandContext& ctx, Args args);
bool CheckTouch(CommandContext& ctx, Args args);
bool CheckCancel(CommandContext& ctx, Args args);
bool CheckJob(CommandContext& ctx, Args args);
bool CheckPeek(CommandContext& ctx, Args args);
bool CheckQstat(CommandContext& ctx, Args args);
bool CheckQueues(CommandContext& ctx, Args args);
bool CheckPurge(CommandContext& ctx, Args args);
bool CheckDeadletter(CommandContext& ctx, Args args);

const std::vector<CommandSpec>& CommandTable() {
  static const std::vector<CommandSpec> table = {
      {"ping",
       -1,
       CmdPing,
       "connection",
       "Ping the server",
       "1.0.0",
       {{"message", "string", nullptr, true, false}},
       {"fast", "stale", "loading"}},
      {"echo",
       2,
       CmdEcho,
       "connection",
       "Echo the given string",
       "1.0.0",
       {{"message", "string", nullptr, false, false}},
       {"fast", "stale", "loading"}},
      {"quit",
       -1,
       CmdQuit,
       "connection",
       "Close the connection",
       "1.0.0",
       {},
       {"fast", "stale", "loading", "noauth", "allow_busy"},
       {},
       false,
       nullptr,
       true},
      {"reset",
       1,
       CmdReset,
       "connection",
       "Reset the connection",
       "6.2.0",
       {},
       {"fast", "stale", "loading", "noauth", "allow_busy"},
       {},
       false,
       nullptr,
       true},
      {"select",
       2,
       CmdSelect,
       "connection",
       "Change the selected database (only 0 exists)",
       "1.0.0",
       {{"index", "integer", nullptr, false, false}},
       {"fast", "stale", "loading"}},
      {"hello",
       -1,
       CmdHello,
       "connection",
       "Handshake with the server",
       "6.0.0",
       {{"protover", "integer", nullptr, true, false},
        {"username_password",
         "block",
         "AUTH",
         true,
         false,
         {{"username", "string", nullptr, false, false},
          {"password", "string", nullptr, false, false}}},
        {"clientname", "string", "SETNAME", true, false}},
       {"fast", "stale", "loading", "noauth", "allow_busy"}},
      {"auth",
       -2,
       CmdAuth,
       "connection",
       "Bind the connection to a namespace (AUTH <namespace> <token>) or authenticate as admin",
       "1.0.0",
       {{"namespace", "string", nullptr, true, false}, {"token", "string", nullptr, false, false}},
       {"fast", "stale", "loading", "noauth", "allow_busy"}},
      {"client",
       -2,
       CmdClient,
       "connection",
       "A container for client connection commands",
       "2.4.0",
       {},
       {},
       {{"client|getname", 2, "Return the name of the current connection", {}},
        {"client|id", 2, "Return the ID of the current connection", {}},
        {"client|info", 2, "Return information about the current client connection", {}},
        {"client|list",
         -2,
         "Return information about client connections",
         {{"normal", "pure-token", "TYPE", true, false}}},
        {"client|kill",
         -3,
         "Kill connections by address, id, user or type",
         {{"ip:port", "string", nullptr, true, false},
          {"id", "integer", "ID", true, false},
          {"addr", "string", "ADDR", true, false},
          {"laddr", "string", "LADDR", true, false},
          {"user", "string", "USER", true, false},
          {"normal", "pure-token", "TYPE", true, false},
          {"skipme", "string", "SKIPME", true, false}}},
        {"client|setname",
         3,
         "Assign a name to the current connection",
         {{"connection-name", "string", nullptr, false, false}}},
        {"client|setinfo",
         4,
         "Record library name and version (accepted, ignored)",
         {{"attr", "string", nullptr, false, false}, {"value", "string", nullptr, false, false}}},
        {"client|help", 2, "Show helpful text about the different subcommands", {}}}},
      {"command",
       -1,
       CmdCommand,
       "server",
       "Get array of command details",
       "2.8.13",
       {},
       {"stale", "loading"},
       {{"command|count", 2, "Get total number of commands", {}},
        {"command|docs",
         -2,
         "Get documentary information about commands",
         {{"command-name", "string", nullptr, true, true}}},
        {"command|info",
         -2,
         "Get array of specific command details",
         {{"command-name", "string", nullptr, true, true}}},
        {"command|list", -2, "Get an array of command names", {}},
        {"command|help", 2, "Show helpful text about the different subcommands", {}}}},
      {"info",
       -1,
       CmdInfo,
       "server",
       "Get information and statistics about the server",
       "1.0.0",
       {{"section", "string", nullptr, true, true}},
       {"stale", "loading"}},
      {"time",
       1,
       CmdTime,
       "server",
       "Return the current server time",
       "2.6.0",
       {},
       {"fast", "stale", "loading"}},
      // Transactions (SPEC §2): run at once, even between MULTI and EXEC.
      {"multi",
       1,
       CmdMulti,
       "transactions",
       "Start a transaction",
       "1.2.0",
       {},
       {"noscript", "loading", "stale", "fast", "allow_busy"},
       {},
       false,
       nullptr,
       true},
      {"exec",
       1,
       CmdExec,
       "transactions",
       "Execute all commands issued after MULTI",
       "1.2.0",
       {},
       {"noscript", "loading", "stale", "skip_slowlog"},
       {},
       false,
       nullptr,
       true},
      {"discard",
       1,
       CmdDiscard,
       "transactions",
       "Discard all commands issued after MULTI",
       "2.0.0",
       {},
       {"noscript", "loading", "stale", "fast", "allow_busy"},
       {},
       false,
       nullptr,
       true},
      {"watch",
       -2,
       CmdWatch,
       "transactions",
       "Not supported by deferq (answers an error)",
       "2.2.0",
       {{"key", "key", nullptr, false, true}},
       {"noscript", "loading", "stale", "fast", "allow_busy"},
       {},
       false,
       nullptr,
       true},
      {"unwatch",
       1,
       CmdWatch,
       "transactions",
       "Not supported by deferq (answers an error)",
       "2.2.0",
       {},
       {"noscript", "loading", "stale", "fast", "allow_busy"},
       {},
       false,
       nullptr,
       true},
      // Job commands (SPEC §3).
      {"publish",
       -3,
       CmdPublish,
       "deferq",
       "Create a job (ready now, delayed, or recurring)",
       "0.1.0",
       {{"queue", "string", nullptr, false, false},
        {"payload", "string", nullptr, false, false},
        {"delay", "integer", "DELAY", true, false},
        {"pdelay", "integer", "PDELAY", true, false},
        {"at", "integer", "AT", true, false},
        {"pat", "integer", "PAT", true, false},
        {"ttl", "integer", "TTL", true, false},
        {"tries", "integer", "TRIES", true, false},
        {"id", "string", "ID", true, false},
        {"replace", "pure-token", "REPLACE", true, false},
        {"every", "integer", "EVERY", true, false},
        {"backoff", "integer", "BACKOFF", true, false}},
       {"write", "fast"},
       {},
       true,
       CheckPublish},
      {"consume",
       -2,
       CmdConsume,
       "deferq",
       "Lease ready jobs, optionally blocking",
       "0.1.0",
       {{"queue", "string", nullptr, false, true},
        {"ttr", "integer", "TTR", true, false},
        {"timeout", "double", "TIMEOUT", true, false},
        {"count", "integer", "COUNT", true, false}},
       {"write", "blocking"},
       {},
       true,
       CheckConsume,
       false,
       true},
      {"ack",
       -3,
       CmdAck,
       "deferq",
       "Finish jobs (recurring jobs are rescheduled)",
       "0.1.0",
       {{"queue", "string", nullptr, false, false}, {"id", "string", nullptr, false, true}},
       {"write", "fast"},
       {},
       true,
       CheckAck},
      {"nack",
       -3,
       CmdNack,
       "deferq",
       "Give a leased job back now",
       "0.1.0",
       {{"queue", "string", nullptr, false, false},
        {"id", "string", nullptr, false, false},
        {"delay", "integer", "DELAY", true, false}},
       {"write", "fast"},
       {},
       true,
       CheckNack},
      {"touch",
       -3,
       CmdTouch,
       "deferq",
       "Extend a lease",
       "0.1.0",
       {{"queue", "string", nullptr, false, false},
        {"id", "string", nullptr, false, false},
        {"ttr", "integer", "TTR", true, false}},
       {"write", "fast"},
       {},
       true,
       CheckTouch},
      {"cancel",
       -3,
       CmdCancel,
       "deferq",
       "Remove jobs in any state",
       "0.1.0",
       {{"queue", "string", nullptr, false, false}, {"id", "string", nullptr, false, true}},
       {"write", "fast"},
       {},
       true,
       CheckCancel},
      {"job",
       3,
       CmdJob,
       "deferq",
       "Show one job",
       "0.1.0",
       {{"queue", "string", nullptr, false, false}, {"id", "string", nullptr, false, false}},
       {"readonly", "fast"},
       {},
       true,
       CheckJob},
      {"peek",
       -2,
       CmdPeek,
       "deferq",
       "The next ready jobs, without leasing them",
       "0.1.0",
       {{"queue", "string", nullptr, false, false}, {"count", "integer", "COUNT", true, false}},
       {"readonly"},
       {},
       true,
       CheckPeek},
      {"qstat",
       2,
       CmdQstat,
       "deferq",
       "Counts and totals of a queue",
       "0.1.0",
       {{"queue", "string", nullptr, false, false}},
       {"readonly", "fast"},
       {},
       true,
       CheckQstat},
      {"queues",
       -1,
       CmdQueues,
       "deferq",
       "The namespace's queues",
       "0.1.0",
       {{"pattern", "pattern", "MATCH", true, false}},
       {"readonly"},
       {},
       true,
       CheckQueues,
       false,
       true},
      {"purge",
       2,
       CmdPurge,
       "deferq",
       "Delete every job of a queue",
       "0.1.0",
       {{"queue", "string", nullptr, false, false}},
       {"write"},
       {},
       true,
       CheckPurge},
      // QPAUSE and QRESUME take a queue name, as QSTAT does, so they share its argument check.
      {"qpause",
       2,
       CmdQpause,
       "deferq",
       "Stop handing out a queue's jobs (publishes and timers go on)",
       "0.1.0",
       {{"queue", "string", nullptr, false, false}},
       {"write", "fast"},
       {},
       true,
       CheckQstat},
      {"qresume",
       2,
       CmdQresume,
       "deferq",
       "Hand out a paused queue's jobs again",
       "0.1.0",
       {{"queue", "string", nullptr, false, false}},
       {"write", "fast"},
       {},
       true,
       CheckQstat},
      {"deadletter",
       -2,
       CmdDeadletter,
       "deferq",
       "Inspect, respawn or delete dead jobs",
       "0.1.0",
       {},
       {"write"},
       {{"deadletter|size", 3, "Number of dead jobs", {{"queue", "string", nullptr, false, false}}},
        {"deadletter|peek",
         -3,
         "The oldest dead jobs",
         {{"queue", "string", nullptr, false, false}, {"count", "integer", "COUNT", true, false}}},
        {"deadletter|respawn",
         -3,
         "Move the oldest dead jobs back to ready",
         {{"queue", "string", nullptr, false, false},
          {"count", "integer", "COUNT", true, false},
          {"ttl", "integer", "TTL", true, false}}},
        {"deadletter|delete",
         -3,
         "Delete the oldest dead jobs, or one by id",
         {{"queue", "string", nullptr, false, false},
          {"count", "integer", "COUNT", true, false},
          {"id", "string", "ID", true, false}}},
        {"deadletter|help", 2, "Show helpful text about the different subcommands", {}}},
       true,
       CheckDeadletter},
      // Admin commands (SPEC §6): an admin connection only (RequireAdmin, queue/auth.h).
      {"namespace",
       -2,
       CmdNamespace,
       "deferq",
       "Create, list, inspect, delete or use namespaces (admin)",
       "0.1.0",
       {},
       {"admin"},
       {{"namespace|create",
         -3,
         "Create a namespace bound to a pool",
         {{"namespace", "string", nullptr, false, false},
          {"pool", "string", "POOL", true, false},
          {"description", "string", "DESCRIPTION", true, false}}},
        {"namespace|list", 2, "The names of every namespace", {}},
        {"namespace|info",
         3,
         "Pool, description, tokens and queues of a namespace",
         {{"namespace", "string", nullptr, false, false}}},
        {"namespace|delete",
         -3,
         "Delete a namespace (FORCE: with its jobs)",
         {{"namespace", "string", nullptr, false, false},
          {"force", "pure-token", "FORCE", true, false}}},
        {"namespace|use",
         3,
         "Run this admin connection's job commands in a namespace",
         {{"namespace", "string", nullptr, false, false}}},
        {"namespace|help", 2, "Show helpful text about the different subcommands", {}}}},
      {"token",
       -2,
       CmdToken,
       "deferq",
       "Create, list or revoke a namespace's tokens (admin)",
       "0.1.0",
       {},
       {"admin"},
       {{"token|create",
         -3,
         "Create a token (shown once)",
         {{"namespace", "string", nullptr, false, false},
          {"description", "string", "DESCRIPTION", true, false}}},
        {"token|list",
         3,
         "Ids, creation times and descriptions of the tokens",
         {{"namespace", "string", nullptr, false, false}}},
        {"token|revoke",
         4,
         "Revoke a token (by the token or its id)",
         {{"namespace", "string", nullptr, false, false},
          {"token", "string", nullptr, false, false}}},
        {"token|help", 2, "Show helpful text about the different subcommands", {}}}},
      {"pool",
       -2,
       CmdPool,
       "deferq",
       "List the configured pools or inspect one (admin)",
       "0.1.0",
       {},
       {"admin"},
       {{"pool|list", 2, "The names of the configured pools", {}},
        {"pool|info", 3, "State of a pool", {{"pool", "string", nullptr, false, false}}},
        {"pool|help", 2, "Show helpful text about the different subcommands", {}}}},
      {"limit",
       -2,
       CmdLimit,
       "deferq",
       "Set or show a namespace's rate limits (jobs per second)",
       "0.1.0",
       {},
       {"admin"},
       {{"limit|set",
         -5,
         "Limit a namespace's publishes and consumes per second (0 = unlimited)",
         {{"namespace", "string", nullptr, false, false},
          {"publish", "integer", "PUBLISH", true, false},
          {"consume", "integer", "CONSUME", true, false}}},
        {"limit|get",
         3,
         "A namespace's limits (publish, consume)",
         {{"namespace", "string", nullptr, false, false}}},
        {"limit|help", 2, "Show helpful text about the different subcommands", {}}}},
  };
  return table;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    unsigned char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x += 'a' - 'A';
    if (y >= 'A' && y <= 'Z') y += 'a' - 'A';
    if (x != y) return false;
  }
  return true;
}

const CommandSpec* FindCommand(std::string_view name) {
  // A dozen commands today, a few dozen with the job commands: a linear scan with an early
  // length check is as fast as hashing a lowered copy of the name.
  for (const CommandSpec& spec : CommandTable()) {
    if (EqualsIgnoreCase(spec.name, name)) return &spec;
  }
  return nullptr;
}

void ReplyWrongArity(proto::ReplyWriter& reply, std::string_view command) {
  std::string msg = "ERR wrong number of arguments for '";
  for (char c : command) msg.push_back((c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c);
  msg += "' command";
  reply.Error(msg);
}

void ReplySyntaxError(proto::ReplyWriter& reply) { reply.Error("ERR syntax error"); }

void ReplyHelp(proto::ReplyWriter& reply, std::span<const char* const> lines) {
  reply.ArrayHeader(lines.size());
  for (const char* line : lines) reply.Simple(line);
}

bool ParseInteger(std::string_view s, int64_t* out) {
  if (s == "0") {
    *out = 0;
    return true;
  }
  const size_t digits = s.starts_with('-') ? 1 : 0;
  if (s.size() <= digits || s[digits] < '1' || s[digits] > '9') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
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
  if (spec == nullptr) {
    ReplyUnknownCommand(ctx.reply, args);
    return FailTransaction(ctx.session);
  }
  const int argc = static_cast<int>(args.size());
  if ((spec->arity > 0 && argc != spec->arity) || (argc < -spec->arity)) {
    ReplyWrongArity(ctx.reply, spec->name);
    return FailTransaction(ctx.session);
  }
  if (spec->job) {
    if (ctx.server.config().auth_required && !ctx.session.authenticated) {
      ctx.reply.Error("NOAUTH Authentication required.");
      return FailTransaction(ctx.session);
    }
    if (ctx.worker == nullptr || ctx.client == nullptr) {
      ctx.reply.Error("ERR job commands are not available here");
      return FailTransaction(ctx.session);
    }
  }
  if (ctx.session.multi.active && !spec->immediate) return QueueCommand(ctx, *spec, args);
  // The namespace binding is checked again once it is older than auth.cache_seconds (before a
  // job command, or before EXEC runs its queued ones); the command may wait for a lookup.
  const bool runs_jobs =
      spec->job || (spec->handler == CmdExec && ctx.session.multi.active &&
                    !ctx.session.multi.failed && !ctx.session.multi.commands.empty());
  if (runs_jobs && !NamespaceGate(ctx, args)) return;
  spec->handler(ctx, args);
}

}  // namespace deferq::queue
