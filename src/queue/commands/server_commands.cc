// Server introspection commands: COMMAND (what redis-cli and client libraries ask on connect)
// and INFO (Redis's format: "# Section" headers and field:value lines).
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <map>
#include <string>
#include <utility>

#include "base/clock.h"
#include "config/build_info.h"
#include "queue/commands/commands.h"
#include "queue/context/instance.h"
#include "queue/delivery/pump.h"
#include "queue/model/queue_figures.h"
#include "queue/model/queue_name.h"
#include "queue/stats/queue_stats.h"
#include "queue/tenancy/rate_limiter.h"

namespace deferq::queue {

namespace {

// The ACL category Redis would give a command of this documentation group.
const char* AclCategory(const char* group) {
  std::string_view g = group;
  if (g == "connection") return "@connection";
  if (g == "server") return "@admin";
  if (g == "transactions") return "@transaction";
  return "@deferq";
}

// One COMMAND INFO entry, the 10-element shape of Redis 7:
// name, arity, flags, first key, last key, step, ACL categories, tips, key specs, subcommands.
void WriteCommandInfo(proto::ReplyWriter& w, const char* name, int arity,
                      const std::vector<const char*>& flags, const char* group,
                      const std::vector<SubcommandSpec>* subs) {
  w.ArrayHeader(10);
  w.Bulk(name);
  w.Integer(arity);
  w.SetHeader(flags.size());
  for (const char* f : flags) w.Simple(f);
  w.Integer(0);
  w.Integer(0);
  w.Integer(0);
  w.SetHeader(1);
  w.Simple(AclCategory(group));
  w.ArrayHeader(0);
  w.ArrayHeader(0);
  if (subs == nullptr) {
    w.ArrayHeader(0);
    return;
  }
  w.ArrayHeader(subs->size());
  for (const SubcommandSpec& sub : *subs) {
    WriteCommandInfo(w, sub.name, sub.arity, {}, group, nullptr);
  }
}

void WriteCommandInfo(proto::ReplyWriter& w, const CommandSpec& spec) {
  WriteCommandInfo(w, spec.name, spec.arity, spec.flags, spec.docs.group, &spec.docs.subcommands);
}

void WriteArgDocs(proto::ReplyWriter& w, const std::vector<ArgDoc>& args) {
  w.ArrayHeader(args.size());
  for (const ArgDoc& a : args) {
    const bool has_flags = a.optional || a.multiple;
    const bool has_sub = !a.sub.empty();
    w.MapHeader(2 + (a.token ? 1 : 0) + (has_flags ? 1 : 0) + (has_sub ? 1 : 0));
    w.Bulk("name");
    w.Bulk(a.name);
    w.Bulk("type");
    w.Bulk(a.type);
    if (a.token) {
      w.Bulk("token");
      w.Bulk(a.token);
    }
    if (has_flags) {
      w.Bulk("flags");
      w.SetHeader((a.optional ? 1 : 0) + (a.multiple ? 1 : 0));
      if (a.optional) w.Simple("optional");
      if (a.multiple) w.Simple("multiple");
    }
    if (has_sub) {
      w.Bulk("arguments");
      WriteArgDocs(w, a.sub);
    }
  }
}

// One COMMAND DOCS value: summary, since, group, complexity, then arguments or subcommands.
void WriteCommandDoc(proto::ReplyWriter& w, const char* summary, const char* since,
                     const char* group, const std::vector<ArgDoc>& args,
                     const std::vector<SubcommandSpec>* subs) {
  const bool has_args = !args.empty();
  const bool has_subs = subs != nullptr && !subs->empty();
  w.MapHeader(4 + (has_args ? 1 : 0) + (has_subs ? 1 : 0));
  w.Bulk("summary");
  w.Bulk(summary);
  w.Bulk("since");
  w.Bulk(since);
  w.Bulk("group");
  w.Bulk(group);
  w.Bulk("complexity");
  w.Bulk("O(1)");
  if (has_args) {
    w.Bulk("arguments");
    WriteArgDocs(w, args);
  }
  if (has_subs) {
    w.Bulk("subcommands");
    w.MapHeader(subs->size());
    for (const SubcommandSpec& sub : *subs) {
      w.Bulk(sub.name);
      WriteCommandDoc(w, sub.summary, since, group, sub.args, nullptr);
    }
  }
}

void WriteCommandDoc(proto::ReplyWriter& w, const CommandSpec& spec) {
  const CommandDocs& d = spec.docs;
  WriteCommandDoc(w, d.summary, d.since, d.group, d.args, &d.subcommands);
}

void AppendField(std::string* out, std::string_view key, std::string_view value) {
  out->append(key);
  out->push_back(':');
  out->append(value);
  out->append("\r\n");
}

void AppendField(std::string* out, std::string_view key, uint64_t value) {
  AppendField(out, key, std::to_string(value));
}

// /proc/self/exe, as Redis's `executable` (procfs is served from memory: no device wait).
std::string ExecutablePath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// What INFO shows a connection (docs/commands.md, connection commands: a namespace can only ever
// see its own queues). Without auth.required every connection sees everything; with it, the admin
// does, and a tenant (a connection bound to a namespace) sees its namespace's queues and job
// totals, and neither the host's files nor the upstream addresses. (Before AUTH, INFO answers
// NOAUTH.)
struct QueueScope {
  enum class Kind { kAll, kNamespace, kNone };
  Kind kind = Kind::kAll;
  std::string ns;

  static QueueScope Of(const Config& config, const Session& s) {
    if (!config.auth_required || s.admin) return {};
    if (!s.authenticated) return {Kind::kNone, {}};
    return {Kind::kNamespace, s.ns};
  }
  bool Shows(std::string_view tag) const {
    if (kind == Kind::kAll) return true;
    std::string_view ns, queue;
    return kind == Kind::kNamespace && QueueName::Split(tag, &ns, &queue) && ns == this->ns;
  }
};

void InfoServer(ServerContext& server, Instance&, const QueueScope& scope, std::string* out) {
  struct utsname name;
  uname(&name);
  const int64_t now_ms = base::RealtimeMs();
  const uint64_t uptime_s = static_cast<uint64_t>(now_ms - server.start_time_ms()) / 1000;
  out->append("# Server\r\n");
  AppendField(out, "deferq_version", kVersion);
  // Client libraries and tools read redis_version to pick a protocol feature level; deferq
  // speaks the Redis 7 protocol.
  AppendField(out, "redis_version", "7.0.0");
  AppendField(out, "redis_mode", "standalone");
  AppendField(out, "os", std::string(name.sysname) + " " + name.release + " " + name.machine);
  AppendField(out, "arch_bits", sizeof(void*) * 8);
  AppendField(out, "multiplexing_api", "io_uring");
  AppendField(out, "mem_allocator", AllocatorDescription());
  AppendField(out, "process_id", static_cast<uint64_t>(getpid()));
  AppendField(out, "tcp_port", server.port());
  AppendField(out, "server_time_usec", static_cast<uint64_t>(now_ms) * 1000);
  AppendField(out, "uptime_in_seconds", uptime_s);
  AppendField(out, "uptime_in_days", uptime_s / 86400);
  AppendField(out, "io_threads", static_cast<uint64_t>(server.threads()));
  // A tenant (auth.required, bound to a namespace) sees nothing of the host's files.
  if (scope.kind == QueueScope::Kind::kAll) {
    AppendField(out, "config_file", server.config().config_file);
  }
  // As Redis names them: run_id identifies this process (deferq's pump-lease instance id), hz
  // is the loops' tick rate (100 ms).
  AppendField(out, "run_id", server.instance_id());
  AppendField(out, "hz", 10);
  AppendField(out, "configured_hz", 10);
  AppendField(out, "gcc_version", __VERSION__);
  if (scope.kind == QueueScope::Kind::kAll) AppendField(out, "executable", ExecutablePath());
}

// From the loops' snapshots of their own connections (ClientsQuery::kCount).
void InfoClients(ServerContext& server, const ClientsReport& r, std::string* out) {
  out->append("# Clients\r\n");
  AppendField(out, "connected_clients", r.connected);
  AppendField(out, "maxclients", server.config().max_clients);
  AppendField(out, "client_recent_max_input_buffer", r.max_input_buffer);
  AppendField(out, "client_recent_max_output_buffer", r.max_output_buffer);
  AppendField(out, "blocked_clients", r.blocked);
}

// Redis's bytesToHuman: "512B", "1.50K", "23.12M", "1.02G".
std::string HumanBytes(uint64_t n) {
  char buf[32];
  const double d = static_cast<double>(n);
  if (n < 1024) {
    snprintf(buf, sizeof(buf), "%lluB", static_cast<unsigned long long>(n));
  } else if (n < 1024ull * 1024) {
    snprintf(buf, sizeof(buf), "%.2fK", d / 1024);
  } else if (n < 1024ull * 1024 * 1024) {
    snprintf(buf, sizeof(buf), "%.2fM", d / (1024 * 1024));
  } else {
    snprintf(buf, sizeof(buf), "%.2fG", d / (1024.0 * 1024 * 1024));
  }
  return buf;
}

// deferq's own memory under Redis's names, so redis-cli --stat and INFO parsers read sane
// figures (Redis's own memory is in the pool's INFO, not here). deferq holds no jobs: it never
// evicts, so maxmemory is 0 and the policy noeviction.
void InfoMemory(ServerContext&, Instance&, const QueueScope&, std::string* out) {
  const ProcessMemory m = ReadProcessMemory();
  out->append("# Memory\r\n");
  AppendField(out, "used_memory", m.used);
  AppendField(out, "used_memory_human", HumanBytes(m.used));
  AppendField(out, "used_memory_rss", m.rss);
  AppendField(out, "used_memory_rss_human", HumanBytes(m.rss));
  AppendField(out, "used_memory_peak", m.used_peak);
  AppendField(out, "used_memory_peak_human", HumanBytes(m.used_peak));
  AppendField(out, "used_memory_rss_peak", m.rss_peak);
  char ratio[32];
  snprintf(ratio, sizeof(ratio), "%.2f",
           m.used == 0 ? 0.0 : static_cast<double>(m.rss) / static_cast<double>(m.used));
  AppendField(out, "mem_fragmentation_ratio", ratio);
  AppendField(out, "maxmemory", uint64_t{0});
  AppendField(out, "maxmemory_human", "0B");
  AppendField(out, "maxmemory_policy", "noeviction");
  AppendField(out, "mem_allocator", AllocatorDescription());
}

// The job counters of every queue of the pools, summed (queue_stats.h: read from Redis every few
// seconds, so fleet-wide and the same on every instance), and how old they are.
void AppendJobTotals(ServerContext& server, Instance& instance, const QueueScope& scope,
                     std::string* out) {
  const auto snap = instance.queue_stats().Load();
  for (const FigureName& name : kFigureNames) {
    if (name.total == nullptr) continue;
    int64_t sum = 0;
    if (snap != nullptr) {
      for (const auto& entry : snap->queues) {
        if (scope.Shows(entry.first)) sum += entry.second.v[name.field];
      }
    }
    AppendField(out, name.total, std::to_string(sum));
  }
  AppendField(out, "job_stats_age_ms",
              snap == nullptr ? "-1" : std::to_string(base::RealtimeMs() - snap->taken_wall_ms));
  const ServerStatsSnapshot stats = server.Stats();
  AppendField(out, "pump_owner", stats.pump_owner ? "1" : "0");
  // Shards of sharded queues this instance owns the pumping of (queue/delivery/shard_pump.h).
  AppendField(out, "pump_shards", std::to_string(stats.pump_shards));
}

void InfoStats(ServerContext& server, Instance& instance, const QueueScope& scope,
               std::string* out) {
  const ServerStatsSnapshot s = server.Stats();
  out->append("# Stats\r\n");
  AppendField(out, "total_connections_received", s.total_connections_received);
  AppendField(out, "total_commands_processed", s.total_commands_processed);
  AppendField(out, "total_net_input_bytes", s.total_net_input_bytes);
  AppendField(out, "total_net_output_bytes", s.total_net_output_bytes);
  AppendField(out, "rejected_connections", s.rejected_connections);
  AppendField(out, "total_protocol_errors", s.protocol_errors);
  AppendField(out, "client_output_limit_disconnections", s.output_limit_disconnections);
  AppendField(out, "client_output_buffer_limit_disconnections", s.output_limit_disconnections);
  AppendField(out, "client_query_buffer_limit_disconnections", s.query_limit_disconnections);
  // With auth.required: failed AUTHs, and connections closed for not authenticating in time or
  // to keep the unauthenticated share of max_clients.
  AppendField(out, "auth_failures", s.auth_failures);
  AppendField(out, "auth_timeout_disconnections", s.auth_timeout_disconnections);
  AppendField(out, "unauthenticated_evictions", s.unauthenticated_evictions);
  // Commands refused with -RATELIMIT (LIMIT SET), over every thread.
  AppendField(out, "rejected_ratelimit_publish", RateLimitRejections(RateKind::kPublish).Read());
  AppendField(out, "rejected_ratelimit_consume", RateLimitRejections(RateKind::kConsume).Read());
  AppendJobTotals(server, instance, scope, out);
}

// Per pool: up when at least one connection is, refused while a handshake check fails (the log
// says why), with what is in flight, the last latency, and the requests that failed: TRYAGAIN
// (never sent) and TIMEOUT (sent, no answer); whether writes go through (ok, evicting, full,
// misconf) and how many were refused for each cause.
void InfoPools(ServerContext& server, Instance&, const QueueScope& scope, std::string* out) {
  out->append("# Pools\r\n");
  // The upstream addresses are the operator's business, not a tenant's.
  if (scope.kind != QueueScope::Kind::kAll) return;
  for (const PoolSnapshot& p : server.Pools()) {
    char buf[448];
    snprintf(buf, sizeof(buf),
             "addr=%s,state=%s,connections_up=%d,connections=%d,inflight=%lld,latency_us=%lld,"
             "requests=%llu,failures=%llu,timeouts=%llu,unreplicated=%llu,writes=%s,"
             "refused_evicting=%llu,refused_oom=%llu,refused_misconf=%llu",
             p.addr.c_str(),
             p.connections_up > 0 ? "up"
             : p.refused          ? "refused"
                                  : "down",
             p.connections_up, p.connections, static_cast<long long>(p.inflight),
             static_cast<long long>(p.latency_us), static_cast<unsigned long long>(p.requests),
             static_cast<unsigned long long>(p.failures),
             static_cast<unsigned long long>(p.timeouts),
             static_cast<unsigned long long>(p.unreplicated), p.writes,
             static_cast<unsigned long long>(p.refused_evicting),
             static_cast<unsigned long long>(p.refused_oom),
             static_cast<unsigned long long>(p.refused_misconf));
    AppendField(out, "pool_" + p.name, buf);
  }
}

// The INFO key of a queue: unique per queue, as `db0` is per database in Redis's # Keyspace, so
// the info() parsers of client libraries (which split each line at its first ':') keep every
// queue. "queue_" + namespace + "/" + queue, with ':' (allowed in names) written "%3A": names
// never contain '/' or '%', so the key is injective and decodes back by replacing "%3A" by ':'.
std::string InfoQueueKey(std::string_view tag) {
  std::string key = "queue_";
  for (char c : tag) {
    if (c == ':') {
      key += "%3A";
    } else {
      key += c;
    }
  }
  return key;
}

// Per queue: its backlog and job counters (read from Redis, queue_stats.h) and how late delayed
// jobs became ready against their due time on this instance (ms). At most metrics_max_queues
// lines, in name order; `queues_left_out` counts the rest. Only the queues `scope` shows are
// listed or counted.
void InfoQueues(ServerContext& server, Instance& instance, const QueueScope& scope,
                std::string* out) {
  const size_t max_queues = server.config().metrics_max_queues;
  using F = QueueFigures;
  out->append("# Queues\r\n");
  const auto snap = instance.queue_stats().Load();
  std::map<std::string, std::pair<const F*, const LatenessHistogram*>> queues;
  const auto lateness = instance.lateness().Snapshot();
  if (snap != nullptr) {
    for (const auto& [tag, f] : snap->queues) {
      if (scope.Shows(tag)) queues[tag].first = &f;
    }
  }
  for (const auto& [tag, h] : lateness) {
    if (scope.Shows(tag)) queues[tag].second = h.get();
  }
  size_t written = 0;
  for (const auto& [tag, figures] : queues) {
    if (written == max_queues) break;
    ++written;
    // The lateness fields first: tools that read the line's start (docs/metrics.md) keep working.
    const LatenessHistogram* h = figures.second;
    char buf[512];
    snprintf(buf, sizeof(buf),
             "lateness_count=%llu,lateness_p50_ms=%lld,lateness_p90_ms=%lld,"
             "lateness_p99_ms=%lld,lateness_max_ms=%lld",
             static_cast<unsigned long long>(h ? h->count() : 0),
             static_cast<long long>(h ? h->Quantile(0.50) : 0),
             static_cast<long long>(h ? h->Quantile(0.90) : 0),
             static_cast<long long>(h ? h->Quantile(0.99) : 0),
             static_cast<long long>(h ? h->max() : 0));
    std::string line = buf;
    if (const F* f = figures.first) {
      for (const FigureName& name : kFigureNames) {
        line += ',';
        line += name.info;
        line += '=';
        line += std::to_string(f->v[name.field]);
      }
    }
    AppendField(out, InfoQueueKey(tag), line);
  }
  AppendField(out, "queues_left_out", static_cast<uint64_t>(queues.size() - written));
}

struct InfoSection {
  const char* name;
  void (*write)(ServerContext&, Instance&, const QueueScope&, std::string*);
};

// clients: written from the loops' answers (InfoClients); queues: for the connection's scope
// (InfoQueues). Neither has a plain writer.
constexpr InfoSection kSections[] = {
    {"server", InfoServer}, {"clients", nullptr}, {"memory", InfoMemory},
    {"stats", InfoStats},   {"pools", InfoPools}, {"queues", nullptr},
};
constexpr size_t kClientsSection = 1;
constexpr size_t kQueuesSection = 5;
static_assert(std::string_view(kSections[kClientsSection].name) == "clients");
static_assert(std::string_view(kSections[kQueuesSection].name) == "queues");

}  // namespace

/* COMMAND | COMMAND COUNT | COMMAND INFO [name ...] | COMMAND DOCS [name ...] | COMMAND LIST */
void CmdCommand(CommandContext& ctx, Args args) {
  const auto& table = CommandTable();
  proto::ReplyWriter& w = ctx.reply;
  if (args.size() == 1) {
    w.ArrayHeader(table.size());
    for (const CommandSpec& spec : table) WriteCommandInfo(w, spec);
    return;
  }
  std::string_view sub = args[1];
  if (EqualsIgnoreCase(sub, "count")) {
    if (args.size() != 2) return ReplyWrongArity(w, "command|count");
    return w.Integer(static_cast<int64_t>(table.size()));
  }
  if (EqualsIgnoreCase(sub, "list")) {
    if (args.size() != 2) return ReplySyntaxError(w);
    w.ArrayHeader(table.size());
    for (const CommandSpec& spec : table) w.Bulk(spec.name);
    return;
  }
  if (EqualsIgnoreCase(sub, "info")) {
    if (args.size() == 2) {
      w.ArrayHeader(table.size());
      for (const CommandSpec& spec : table) WriteCommandInfo(w, spec);
      return;
    }
    w.ArrayHeader(args.size() - 2);
    for (size_t i = 2; i < args.size(); ++i) {
      const CommandSpec* spec = FindCommand(args[i]);
      if (spec == nullptr) {
        w.Null();  // Redis answers $-1 here, not *-1
      } else {
        WriteCommandInfo(w, *spec);
      }
    }
    return;
  }
  if (EqualsIgnoreCase(sub, "docs")) {
    // Like Redis, unknown names are left out of the map.
    std::vector<const CommandSpec*> found;
    if (args.size() == 2) {
      for (const CommandSpec& spec : table) found.push_back(&spec);
    } else {
      for (size_t i = 2; i < args.size(); ++i) {
        if (const CommandSpec* spec = FindCommand(args[i])) found.push_back(spec);
      }
    }
    w.MapHeader(found.size());
    for (const CommandSpec* spec : found) {
      w.Bulk(spec->name);
      WriteCommandDoc(w, *spec);
    }
    return;
  }
  if (EqualsIgnoreCase(sub, "help")) {
    static const char* const kHelp[] = {
        "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "(no subcommand)",
        "    Return details about all deferq commands.",
        "COUNT",
        "    Return the total number of commands in this deferq server.",
        "LIST",
        "    Return a list of all commands in this deferq server.",
        "INFO [<command-name> ...]",
        "    Return details about multiple deferq commands.",
        "DOCS [<command-name> ...]",
        "    Return documentation details about multiple deferq commands.",
        "HELP",
        "    Print this help.",
    };
    w.ArrayHeader(std::size(kHelp));
    for (const char* line : kHelp) w.Simple(line);
    return;
  }
  std::string msg = "ERR unknown subcommand '";
  msg.append(sub.substr(0, 128));
  msg += "'. Try COMMAND HELP.";
  w.Error(msg);
}

/* INFO [section ...]: server, clients, memory, stats, pools, queues; "all", "default", "everything"
 * name them all. The clients section asks every loop thread, so INFO with it replies later. */
void CmdInfo(CommandContext& ctx, Args args) {
  std::array<bool, std::size(kSections)> want{};
  if (args.size() == 1) want.fill(true);
  for (size_t i = 1; i < args.size(); ++i) {
    if (EqualsIgnoreCase(args[i], "all") || EqualsIgnoreCase(args[i], "default") ||
        EqualsIgnoreCase(args[i], "everything")) {
      want.fill(true);
      continue;
    }
    for (size_t s = 0; s < std::size(kSections); ++s) {
      if (EqualsIgnoreCase(args[i], kSections[s].name)) want[s] = true;
    }
  }
  ServerContext* server = &ctx.server;  // lives as long as the process
  Instance* instance = ctx.instance;    // so does this
  // Taken now: the binding in force when INFO was read decides what it shows.
  QueueScope scope = QueueScope::Of(ctx.server.config(), ctx.session);
  auto write = [server, instance, want, scope = std::move(scope)](proto::ReplyWriter& w,
                                                                  const ClientsReport* clients) {
    std::string out;
    for (size_t s = 0; s < std::size(kSections); ++s) {
      if (!want[s]) continue;
      if (!out.empty()) out.append("\r\n");
      if (s == kClientsSection) {
        InfoClients(*server, *clients, &out);
      } else if (s == kQueuesSection) {
        InfoQueues(*server, *instance, scope, &out);
      } else {
        kSections[s].write(*server, *instance, scope, &out);
      }
    }
    w.Verbatim(out);
  };
  if (!want[kClientsSection]) return write(ctx.reply, nullptr);
  ClientsQuery query;
  query.kind = ClientsQuery::Kind::kCount;
  ReplyWithClients(ctx, std::move(query),
                   [write](proto::ReplyWriter& w, const ClientsReport& r) { write(w, &r); });
}

}  // namespace deferq::queue
