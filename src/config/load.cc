// Loading deferq's configuration: the TOML file (docs/configuration.md), the command line, and the
// cross-key checks that tie them together.
//
// Startup-only code, so toml++ exceptions are allowed inside this file; none escapes a public
// function. Each public function works on a copy and writes the caller's Config only on success,
// so a failed load leaves the caller's configuration as it was.
#include "config/load.h"

#include <fcntl.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "config/job_limits.h"
#include "config/keys.h"
#include "config/queue_tag.h"
#include "config/redis_url.h"

namespace deferq {
namespace {

constexpr int kMaxConnectionsPerThread = 64;
constexpr int kMaxWaitReplicas = 1000;
// CONSUME's longest TIMEOUT (a century, as every duration of the job commands): a default past it
// would turn into a deadline that int64 milliseconds cannot hold.
constexpr double kMaxTimeoutS = static_cast<double>(kMaxDurationS);
// A config file is a few KiB; past this it is not one (--config /dev/zero would read for ever).
constexpr size_t kMaxConfigBytes = 1024 * 1024;
constexpr int kMaxQueueShards = 256;  // a generated id carries its shard in one byte
// docs/commands.md, errors and limits: the protocol's bulk limit leaves room for a command's other
// arguments around a payload.
constexpr uint64_t kBulkSlack = 1024;
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// ---------------------------------------------------------------------------------------------
// Checks shared by the file loader, the command line and ValidateConfig. Each returns "" when the
// value is acceptable, otherwise what is wrong (without the key, which the caller knows).

// Pool, namespace and queue names share one name rule (docs/commands.md); `what` names the kind in
// the message.
std::string CheckName(std::string_view name, std::string_view what) {
  const std::string why = std::string(what) + " names are 1-200 characters of [A-Za-z0-9_.:-]";
  return ValidName(name) ? "" : why;
}

std::string CheckPoolName(std::string_view name) { return CheckName(name, "pool"); }

// A sharded queue's name: a queue name CONSUME can tell from its options (docs/commands.md, names).
std::string CheckShardedQueueName(std::string_view name) {
  if (std::string why = CheckName(name, "queue"); !why.empty()) return why;
  if (IsConsumeKeyword(name)) return "is not a valid queue name (a CONSUME option)";
  return "";
}

// The text of a Redis address is never echoed back: it may carry a password, and these messages
// end up in logs.
std::string CheckRedisAddress(std::string_view url) {
  RedisUrl parsed;
  std::string why;
  if (ParseRedisUrl(url, &parsed, &why)) return "";
  return "invalid Redis address: " + why;
}

// A Sentinel is reached as "host:port"; credentials for it are not supported.
std::string CheckSentinelAddress(std::string_view addr) {
  if (addr.find("://") != std::string_view::npos) return "expected host:port, not a URL";
  return CheckRedisAddress(addr);
}

// A listening address: "host:port" or "[ipv6]:port". The bare form of a Redis address is exactly
// this grammar, so the parser is shared; the URL-only parts are refused first.
std::string ParseListenAddress(std::string_view text, std::string* host, uint16_t* port) {
  if (text.find("://") != std::string_view::npos || text.find('@') != std::string_view::npos ||
      text.find('/') != std::string_view::npos) {
    return "expected host:port (IPv6 as [::1]:6380)";
  }
  if (!text.empty() && text.front() != '[' && text.find(':') != text.rfind(':')) {
    return "IPv6 addresses need brackets, e.g. [::1]:6380";
  }
  RedisUrl parsed;
  std::string why;
  if (!ParseRedisUrl(text, &parsed, &why)) return why;
  if (host != nullptr) *host = parsed.host;
  if (port != nullptr) *port = parsed.port;
  return "";
}

// server.metrics_listen = "" or "off" turns the metrics endpoint off.
bool MetricsDisabled(const std::string& value) { return value.empty() || value == "off"; }

std::string JoinHostPort(const std::string& host, uint16_t port) {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// The exclusive-kind rules of one pool (docs/configuration.md). *key receives the key to blame.
std::string CheckPoolKinds(const PoolConfig& pool, std::string* key) {
  std::string prefix = "pools." + pool.name;
  std::vector<std::string> kinds;
  if (!pool.addr.empty()) kinds.push_back("addr");
  if (!pool.cluster.empty()) kinds.push_back("cluster");
  if (!pool.sentinels.empty()) kinds.push_back("sentinels");
  *key = prefix;
  if (kinds.empty()) return "needs one of addr, cluster or sentinels";
  if (kinds.size() > 1) {
    std::string found = kinds[0];
    for (size_t i = 1; i < kinds.size(); ++i) found += " and " + kinds[i];
    return "addr, cluster and sentinels exclude each other; give exactly one (found " + found + ")";
  }
  if (!pool.sentinels.empty() && pool.master.empty()) {
    *key = prefix + ".master";
    return "is required with sentinels (the Sentinel master name)";
  }
  if (pool.sentinels.empty() && !pool.master.empty()) {
    *key = prefix + ".master";
    return "only applies to a pool with sentinels";
  }
  if (pool.sentinels.empty() &&
      (!pool.sentinel_password.empty() || !pool.master_password.empty())) {
    *key = prefix + (pool.sentinel_password.empty() ? ".master_password" : ".sentinel_password");
    return "only applies to a pool with sentinels";
  }
  if (pool.sentinels.empty() && pool.tls) {
    *key = prefix + ".tls";
    return "only applies to a pool with sentinels (give addr or cluster as rediss:// URLs)";
  }
  return "";
}

// max_bulk_len must leave room for a max_payload-sized argument (docs/commands.md, errors and
// limits).
bool BulkLenFitsPayload(const Config& cfg) {
  return cfg.max_bulk_len >= cfg.max_payload + kBulkSlack;
}

std::string BulkLenMessage(const Config& cfg) {
  return "server.max_bulk_len (" + std::to_string(cfg.max_bulk_len) +
         ") must be at least server.max_payload + 1024 (" +
         std::to_string(cfg.max_payload + kBulkSlack) + ")";
}

void AddOrReplacePool(PoolConfig pool, std::vector<PoolConfig>* pools) {
  for (PoolConfig& existing : *pools) {
    if (existing.name == pool.name) {
      existing = std::move(pool);
      return;
    }
  }
  pools->push_back(std::move(pool));
}

// ---------------------------------------------------------------------------------------------
// The TOML loader.

std::string_view TypeName(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

// Reads the tables of one parsed document into a Config, stopping at the first error.
class TomlLoader {
 public:
  TomlLoader(std::string_view source, Config* cfg, std::string* error)
      : source_(source), cfg_(cfg), error_(error) {}

  bool Load(const toml::table& root) {
    for (auto&& [k, node] : root) {
      std::string key(k.str());
      bool known = key == "server" || key == "tls" || key == "auth" || key == "defaults" ||
                   key == "pools" || key == "shards";
      if (!known) return Fail(node, key, node.is_table() ? "unknown table" : "unknown key");
      const toml::table* table = node.as_table();
      if (table == nullptr) return WrongType(node, key, "a table");
      bool ok = key == "shards"  ? LoadShards(*table)
                : key == "pools" ? LoadPools(*table)
                                 : LoadSection(*table, key);
      if (!ok) return false;
    }
    return true;
  }

 private:
  bool Fail(const toml::node& node, const std::string& key, std::string_view what) {
    *error_ = std::string(source_) + ":" + std::to_string(node.source().begin.line) + ": key '" +
              key + "': " + std::string(what);
    return false;
  }

  bool WrongType(const toml::node& node, const std::string& key, std::string_view expected) {
    return Fail(node, key,
                "must be " + std::string(expected) + ", got " + std::string(TypeName(node)));
  }

  // An integer in [lo, hi].
  bool Int(const toml::node& node, const std::string& key, int64_t lo, int64_t hi, int64_t* out) {
    const toml::value<int64_t>* v = node.as_integer();
    if (v == nullptr) return WrongType(node, key, "an integer");
    int64_t value = v->get();
    if (value < lo || value > hi) {
      std::string range = hi == kNoUpperBound
                              ? "at least " + std::to_string(lo)
                              : "between " + std::to_string(lo) + " and " + std::to_string(hi);
      return Fail(node, key, "must be " + range + ", got " + std::to_string(value));
    }
    *out = value;
    return true;
  }

  template <typename T>
  bool IntAs(const toml::node& node, const std::string& key, int64_t lo, int64_t hi, T* out) {
    int64_t value = 0;
    if (!Int(node, key, lo, hi, &value)) return false;
    *out = static_cast<T>(value);
    return true;
  }

  bool String(const toml::node& node, const std::string& key, std::string* out) {
    const toml::value<std::string>* v = node.as_string();
    if (v == nullptr) return WrongType(node, key, "a string");
    if (v->get().empty()) return Fail(node, key, "must not be empty");
    *out = v->get();
    return true;
  }

  // A non-empty array of non-empty strings, each accepted by `check`.
  bool StringArray(const toml::node& node, const std::string& key,
                   std::string (*check)(std::string_view), std::vector<std::string>* out) {
    const toml::array* array = node.as_array();
    if (array == nullptr) return WrongType(node, key, "an array of strings");
    if (array->empty()) return Fail(node, key, "must not be empty");
    std::vector<std::string> values;
    for (size_t i = 0; i < array->size(); ++i) {
      const toml::node& element = *array->get(i);
      std::string element_key = key + "[" + std::to_string(i) + "]";
      std::string value;
      if (!String(element, element_key, &value)) return false;
      if (std::string why = check(value); !why.empty()) return Fail(element, element_key, why);
      values.push_back(std::move(value));
    }
    *out = std::move(values);
    return true;
  }

  // A [server], [auth] or [defaults] table: each key as its row in the key table says
  // (config/keys.h).
  bool LoadSection(const toml::table& table, std::string_view section) {
    const toml::node* payload_node = nullptr;
    const toml::node* bulk_node = nullptr;
    for (auto&& [k, node] : table) {
      const std::string name(k.str());
      const std::string key = std::string(section) + "." + name;
      const ConfigKey* row = FindConfigKey(section, name);
      if (row == nullptr) return Fail(node, key, "unknown key");
      if (!LoadKey(*row, node, key)) return false;
      if (key == "server.max_payload") payload_node = &node;
      if (key == "server.max_bulk_len") bulk_node = &node;
    }
    // Checked here rather than only in ValidateConfig so the message can carry a line: blame
    // max_bulk_len when this file set it, else the max_payload that outgrew the default.
    if (!BulkLenFitsPayload(*cfg_)) {
      if (bulk_node != nullptr)
        return Fail(*bulk_node, "server.max_bulk_len", BulkLenMessage(*cfg_));
      if (payload_node != nullptr) {
        return Fail(*payload_node, "server.max_payload",
                    BulkLenMessage(*cfg_) + "; raise server.max_bulk_len too");
      }
    }
    return true;
  }

  bool LoadKey(const ConfigKey& row, const toml::node& node, const std::string& key) {
    switch (row.type) {
      case ConfigKey::Type::kInteger:
        return std::visit(
            [&](auto member) {
              if constexpr (std::is_same_v<decltype(member), int Config::*> ||
                            std::is_same_v<decltype(member), uint32_t Config::*> ||
                            std::is_same_v<decltype(member), uint64_t Config::*>) {
                return IntAs(node, key, row.min, row.max, &(cfg_->*member));
              } else {
                return Fail(node, key, "not an integer key");  // a wrong row: never
              }
            },
            row.member);
      case ConfigKey::Type::kBoolean: {
        const toml::value<bool>* v = node.as_boolean();
        if (v == nullptr) return WrongType(node, key, "a boolean");
        cfg_->*std::get<bool Config::*>(row.member) = v->get();
        return true;
      }
      case ConfigKey::Type::kString:
        return String(node, key, &(cfg_->*std::get<std::string Config::*>(row.member)));
      case ConfigKey::Type::kSpecial:
        break;
    }
    return LoadSpecial(node, key);
  }

  // The keys whose value needs more than a type and a range.
  bool LoadSpecial(const toml::node& node, const std::string& key) {
    if (key == "server.listen") {
      std::string text;
      if (!String(node, key, &text)) return false;
      std::string why = ParseListenAddress(text, &cfg_->listen_host, &cfg_->listen_port);
      return why.empty() || Fail(node, key, why);
    }
    if (key == "tls.listen") {
      std::string text;
      if (!String(node, key, &text)) return false;
      if (text == "off") {
        cfg_->tls_listen_port = 0;
        return true;
      }
      std::string why = ParseListenAddress(text, &cfg_->tls_listen_host, &cfg_->tls_listen_port);
      return why.empty() || Fail(node, key, why);
    }
    if (key == "server.metrics_listen") {
      // The one string that may be empty: "" (like "off") turns the endpoint off.
      const toml::value<std::string>* v = node.as_string();
      if (v == nullptr) return WrongType(node, key, "a string");
      cfg_->metrics_listen = v->get();
      cfg_->metrics_listen_set = true;
      if (MetricsDisabled(cfg_->metrics_listen)) return true;
      std::string why = ParseListenAddress(cfg_->metrics_listen, nullptr, nullptr);
      return why.empty() || Fail(node, key, why);
    }
    if (key == "server.loglevel") {
      std::string level;
      if (!String(node, key, &level)) return false;
      return base::ParseLogLevel(level, &cfg_->log_level) ||
             Fail(node, key, "must be one of debug, info, warning, error");
    }
    // defaults.timeout: seconds like BLPOP's timeout, so a fraction is allowed.
    double value = 0;
    if (const toml::value<int64_t>* i = node.as_integer()) {
      value = static_cast<double>(i->get());
    } else if (const toml::value<double>* f = node.as_floating_point()) {
      value = f->get();
    } else {
      return WrongType(node, key, "a number");
    }
    if (!std::isfinite(value) || value < 0 || value > kMaxTimeoutS) {
      return Fail(node, key, "must be a number of seconds from 0 to 3153600000");
    }
    cfg_->default_timeout = value;
    return true;
  }

  // [shards.NAMESPACE] QUEUE = N. N = 1 is allowed (the queue is not sharded), so a count can be
  // written down before it is raised.
  bool LoadShards(const toml::table& shards) {
    for (auto&& [k, node] : shards) {
      std::string ns(k.str());
      std::string key = "shards." + ns;
      if (std::string why = CheckName(ns, "namespace"); !why.empty()) return Fail(node, key, why);
      if (ns == "admin") return Fail(node, key, "the admin namespace has no queues");
      const toml::table* table = node.as_table();
      if (table == nullptr) return WrongType(node, key, "a table");
      for (auto&& [qk, qnode] : *table) {
        std::string queue(qk.str());
        std::string qkey = key + "." + queue;
        if (std::string why = CheckShardedQueueName(queue); !why.empty()) {
          return Fail(qnode, qkey, why);
        }
        int shards_n = 1;
        if (!IntAs(qnode, qkey, 1, kMaxQueueShards, &shards_n)) return false;
        const std::string tag = QueueTag(ns, queue);
        if (shards_n == 1) {
          cfg_->queue_shards.erase(tag);
        } else {
          cfg_->queue_shards[tag] = shards_n;
        }
      }
    }
    return true;
  }

  bool LoadPools(const toml::table& pools) {
    for (auto&& [k, node] : pools) {
      std::string name(k.str());
      std::string key = "pools." + name;
      if (std::string why = CheckPoolName(name); !why.empty()) return Fail(node, key, why);
      const toml::table* table = node.as_table();
      if (table == nullptr) return WrongType(node, key, "a table");
      // A pool in the file replaces any earlier definition of the same name as a whole, so kinds
      // from two sources never mix.
      PoolConfig pool;
      pool.name = name;
      if (!LoadPool(*table, key, &pool)) return false;
      std::string blamed_key;
      if (std::string why = CheckPoolKinds(pool, &blamed_key); !why.empty()) {
        // Blame the line of the key at fault (master, ...) when present, else the pool's header.
        const toml::node* at_fault = blamed_key.size() > key.size() + 1
                                         ? table->get(blamed_key.substr(key.size() + 1))
                                         : nullptr;
        return Fail(at_fault != nullptr ? *at_fault : node, blamed_key, why);
      }
      AddOrReplacePool(std::move(pool), &cfg_->pools);
    }
    return true;
  }

  bool LoadPool(const toml::table& table, const std::string& prefix, PoolConfig* pool) {
    for (auto&& [k, node] : table) {
      std::string name(k.str());
      std::string key = prefix + "." + name;
      bool ok = true;
      if (name == "addr") {
        ok = String(node, key, &pool->addr);
        if (ok) {
          if (std::string why = CheckRedisAddress(pool->addr); !why.empty()) {
            return Fail(node, key, why);
          }
        }
      } else if (name == "cluster") {
        ok = StringArray(node, key, CheckRedisAddress, &pool->cluster);
      } else if (name == "sentinels") {
        ok = StringArray(node, key, CheckSentinelAddress, &pool->sentinels);
      } else if (name == "master") {
        ok = String(node, key, &pool->master);
      } else if (name == "sentinel_password") {
        ok = String(node, key, &pool->sentinel_password);
      } else if (name == "master_password") {
        ok = String(node, key, &pool->master_password);
      } else if (name == "tls") {
        const toml::value<bool>* v = node.as_boolean();
        if (v == nullptr) return WrongType(node, key, "a boolean");
        pool->tls = v->get();
      } else if (name == "wait_replicas") {
        ok = IntAs(node, key, 0, kMaxWaitReplicas, &pool->wait_replicas);
      } else if (name == "wait_timeout_ms") {
        // WAIT with timeout 0 blocks forever: a bound is required.
        ok = IntAs(node, key, 1, kIntMax, &pool->wait_timeout_ms);
      } else if (name == "connections_per_thread") {
        ok = IntAs(node, key, 1, kMaxConnectionsPerThread, &pool->connections_per_thread);
      } else if (name == "timeout_ms") {
        ok = IntAs(node, key, 1, kIntMax, &pool->timeout_ms);
      } else {
        return Fail(node, key, "unknown key");
      }
      if (!ok) return false;
    }
    return true;
  }

  std::string_view source_;
  Config* cfg_;
  std::string* error_;
};

bool ReadWholeFile(const std::string& path, std::string* text, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = path + ": cannot read: " + std::strerror(errno);
    return false;
  }
  std::string out;
  char buf[16384];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0 && out.size() + static_cast<size_t>(n) > kMaxConfigBytes) {
      *error = path + ": larger than " + std::to_string(kMaxConfigBytes / 1024) +
               " KiB: not a deferq config file";
      ::close(fd);
      return false;
    }
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      *error = path + ": cannot read: " + std::strerror(errno);
      ::close(fd);
      return false;
    }
  }
  ::close(fd);
  *text = std::move(out);
  return true;
}

// ---------------------------------------------------------------------------------------------
// The command line.

struct CliFlag {
  std::string name;   // as spelled: "--port", "-h"
  std::string value;  // "" for flags without a value
};

bool TakesValue(std::string_view name) {
  return name == "--config" || name == "--port" || name == "--threads" || name == "--pool";
}

bool IsSwitch(std::string_view name) {
  return name == "--check-config" || name == "--help" || name == "-h" || name == "--version" ||
         name == "-v";
}

bool CliFail(std::string* error, std::string_view flag, std::string_view what) {
  *error = "command line: " + std::string(flag) + ": " + std::string(what);
  return false;
}

// A decimal integer in [lo, hi], nothing else (no sign, no spaces, no suffix).
bool ParseCliInt(const CliFlag& flag, int64_t lo, int64_t hi, int64_t* out, std::string* error) {
  const std::string& text = flag.value;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  bool digits_only = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (!digits_only || ec != std::errc() || end != text.data() + text.size() || value < lo ||
      value > hi) {
    return CliFail(error, flag.name,
                   "expected an integer between " + std::to_string(lo) + " and " +
                       std::to_string(hi) + ", got '" + text + "'");
  }
  *out = value;
  return true;
}

// Splits argv into flags. Stops early (returning true) at --help or --version, which need nothing
// else from the command line.
bool TokenizeArgs(int argc, const char* const* argv, std::vector<CliFlag>* flags,
                  CliAction* early_action, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i] != nullptr ? argv[i] : "";
    if (arg.size() < 2 || arg[0] != '-') {
      *error = "command line: unexpected argument '" + arg + "'";
      return false;
    }
    CliFlag flag;
    bool inline_value = false;
    size_t eq = arg.find('=');
    if (arg.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      flag.name = arg.substr(0, eq);
      flag.value = arg.substr(eq + 1);
      inline_value = true;
    } else {
      flag.name = arg;
    }
    if (IsSwitch(flag.name)) {
      if (inline_value) return CliFail(error, flag.name, "takes no value");
      if (flag.name == "--help" || flag.name == "-h") {
        *early_action = CliAction::kHelp;
        return true;
      }
      if (flag.name == "--version" || flag.name == "-v") {
        *early_action = CliAction::kVersion;
        return true;
      }
    } else if (TakesValue(flag.name)) {
      // A following "--something" is another flag, not this one's value.
      if (!inline_value && i + 1 < argc && argv[i + 1] != nullptr &&
          std::string_view(argv[i + 1]).substr(0, 2) != "--") {
        flag.value = argv[++i];
      } else if (!inline_value) {
        return CliFail(error, flag.name, "missing value");
      }
      if (flag.value.empty()) return CliFail(error, flag.name, "missing value");
    } else {
      *error = "command line: unknown option '" + flag.name + "'";
      return false;
    }
    flags->push_back(std::move(flag));
  }
  return true;
}

bool ApplyPoolFlag(const CliFlag& flag, Config* cfg, std::string* error) {
  size_t eq = flag.value.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == flag.value.size()) {
    return CliFail(error, flag.name, "expected NAME=URL (e.g. default=redis://127.0.0.1:6379)");
  }
  std::string name = flag.value.substr(0, eq);
  std::string url = flag.value.substr(eq + 1);
  if (std::string why = CheckPoolName(name); !why.empty()) {
    return CliFail(error, flag.name, "invalid pool name '" + name + "': " + why);
  }
  if (std::string why = CheckRedisAddress(url); !why.empty()) {
    return CliFail(error, flag.name, "pool '" + name + "': " + why);
  }
  // The flag makes the pool standalone but keeps its other settings from the file.
  for (PoolConfig& pool : cfg->pools) {
    if (pool.name == name) {
      pool.addr = url;
      pool.cluster.clear();
      pool.sentinels.clear();
      pool.master.clear();
      pool.sentinel_password.clear();
      pool.master_password.clear();
      return true;
    }
  }
  PoolConfig pool;
  pool.name = name;
  pool.addr = url;
  cfg->pools.push_back(std::move(pool));
  return true;
}

bool ParseCommandLineImpl(int argc, const char* const* argv, Config* cfg, CliAction* action,
                          std::string* error) {
  std::vector<CliFlag> flags;
  CliAction early = CliAction::kRun;
  if (!TokenizeArgs(argc, argv, &flags, &early, error)) return false;
  if (early != CliAction::kRun) {
    *action = early;
    return true;
  }

  Config work = *cfg;
  // The file is loaded before any other flag so that flags win wherever they appear.
  const CliFlag* config_flag = nullptr;
  for (const CliFlag& flag : flags) {
    if (flag.name != "--config") continue;
    if (config_flag != nullptr) return CliFail(error, flag.name, "given more than once");
    config_flag = &flag;
  }
  if (config_flag != nullptr && !LoadConfigFile(config_flag->value, &work, error)) return false;

  CliAction result = CliAction::kRun;
  for (const CliFlag& flag : flags) {
    int64_t value = 0;
    if (flag.name == "--port") {
      if (!ParseCliInt(flag, 1, 65535, &value, error)) return false;
      work.listen_port = static_cast<uint16_t>(value);
    } else if (flag.name == "--threads") {
      if (!ParseCliInt(flag, 0, kMaxThreads, &value, error)) return false;
      work.threads = static_cast<int>(value);
    } else if (flag.name == "--pool") {
      if (!ApplyPoolFlag(flag, &work, error)) return false;
    } else if (flag.name == "--check-config") {
      result = CliAction::kCheckConfig;
    }
  }

  if (work.pools.empty()) {
    PoolConfig pool;
    pool.name = "default";
    pool.addr = "redis://127.0.0.1:6379";
    work.pools.push_back(std::move(pool));
  }
  // Every flag was checked as it was applied, so what fails here came from the file.
  std::string why;
  if (!ValidateConfig(work, &why)) {
    *error = work.config_file.empty() ? why : work.config_file + ": " + why;
    return false;
  }
  *cfg = std::move(work);
  *action = result;
  return true;
}

bool ValidateConfigImpl(const Config& cfg, std::string* error) {
  auto fail = [error](const std::string& key, std::string_view what) {
    *error = "key '" + key + "': " + std::string(what);
    return false;
  };
  if (cfg.listen_port == 0) return fail("server.listen", "port must be between 1 and 65535");
  if (std::string why =
          ParseListenAddress(JoinHostPort(cfg.listen_host, cfg.listen_port), nullptr, nullptr);
      !why.empty()) {
    return fail("server.listen", why);
  }
  if (cfg.threads < 0 || cfg.threads > kMaxThreads) {
    return fail("server.threads", "must be between 0 and " + std::to_string(kMaxThreads));
  }
  std::string metrics_host;
  uint16_t metrics_port = 0;
  if (std::string why = MetricsDisabled(cfg.metrics_listen)
                            ? std::string()
                            : ParseListenAddress(cfg.metrics_listen, &metrics_host, &metrics_port);
      !why.empty()) {
    return fail("server.metrics_listen", why);
  }
  // One port cannot serve both (a wildcard address overlaps every other on that port).
  const auto wildcard = [](const std::string& h) { return h == "0.0.0.0" || h == "::"; };
  if (metrics_port != 0 && metrics_port == cfg.listen_port &&
      (metrics_host == cfg.listen_host || wildcard(metrics_host) || wildcard(cfg.listen_host))) {
    return fail("server.metrics_listen", "must not be the address deferq serves RESP on (" +
                                             JoinHostPort(cfg.listen_host, cfg.listen_port) + ")");
  }
  if (cfg.tls_listen_port != 0) {
    if (cfg.tls_cert_file.empty()) return fail("tls.cert_file", "tls.listen needs a certificate");
    if (cfg.tls_listen_port == cfg.listen_port &&
        (cfg.tls_listen_host == cfg.listen_host || wildcard(cfg.tls_listen_host) ||
         wildcard(cfg.listen_host))) {
      return fail("tls.listen", "must not be server.listen's address (" +
                                    JoinHostPort(cfg.listen_host, cfg.listen_port) + ")");
    }
    if (cfg.tls_listen_port == metrics_port &&
        (cfg.tls_listen_host == metrics_host || wildcard(cfg.tls_listen_host) ||
         wildcard(metrics_host))) {
      return fail("tls.listen", "must not be server.metrics_listen's address");
    }
  }
  if (cfg.max_clients < 1) return fail("server.max_clients", "must be at least 1");
  if (cfg.max_payload < 1) return fail("server.max_payload", "must be at least 1");
  if (cfg.max_args < 1) return fail("server.max_args", "must be at least 1");
  if (cfg.max_output_buffer < 1) return fail("server.max_output_buffer", "must be at least 1");
  if (cfg.max_query_buffer < 1) return fail("server.max_query_buffer", "must be at least 1");
  if (!BulkLenFitsPayload(cfg)) return fail("server.max_bulk_len", BulkLenMessage(cfg));
  if (cfg.admin_password_env.empty()) return fail("auth.admin_password_env", "must not be empty");
  if (cfg.default_tries < 1 || cfg.default_tries > kMaxTries) {
    return fail("defaults.tries", "must be between 1 and 65535");
  }
  // The commands' ranges (job_limits.h): a default a command would refuse is refused here.
  if (cfg.default_ttr < 1 || cfg.default_ttr > kMaxTtrS) {
    return fail("defaults.ttr", "must be between 1 and " + std::to_string(kMaxTtrS));
  }
  if (cfg.default_ttl > kMaxDurationS) {
    return fail("defaults.ttl", "must be between 0 and " + std::to_string(kMaxDurationS));
  }
  if (!std::isfinite(cfg.default_timeout) || cfg.default_timeout < 0 ||
      cfg.default_timeout > kMaxTimeoutS) {
    return fail("defaults.timeout", "must be a number of seconds from 0 to 3153600000");
  }

  for (const auto& [tag, n] : cfg.queue_shards) {
    if (n < 1 || n > kMaxQueueShards) {
      return fail("shards." + tag, "must be between 1 and " + std::to_string(kMaxQueueShards));
    }
  }

  bool has_default = false;
  for (size_t i = 0; i < cfg.pools.size(); ++i) {
    const PoolConfig& pool = cfg.pools[i];
    std::string key = "pools." + pool.name;
    if (std::string why = CheckPoolName(pool.name); !why.empty()) return fail(key, why);
    for (size_t j = 0; j < i; ++j) {
      if (cfg.pools[j].name == pool.name) return fail(key, "defined more than once");
    }
    has_default = has_default || pool.name == "default";
    std::string blamed_key;
    if (std::string why = CheckPoolKinds(pool, &blamed_key); !why.empty()) {
      return fail(blamed_key, why);
    }
    if (!pool.addr.empty()) {
      if (std::string why = CheckRedisAddress(pool.addr); !why.empty()) {
        return fail(key + ".addr", why);
      }
    }
    for (size_t j = 0; j < pool.cluster.size(); ++j) {
      if (std::string why = CheckRedisAddress(pool.cluster[j]); !why.empty()) {
        return fail(key + ".cluster[" + std::to_string(j) + "]", why);
      }
    }
    for (size_t j = 0; j < pool.sentinels.size(); ++j) {
      if (std::string why = CheckSentinelAddress(pool.sentinels[j]); !why.empty()) {
        return fail(key + ".sentinels[" + std::to_string(j) + "]", why);
      }
    }
    if (pool.connections_per_thread < 1 || pool.connections_per_thread > kMaxConnectionsPerThread) {
      return fail(key + ".connections_per_thread",
                  "must be between 1 and " + std::to_string(kMaxConnectionsPerThread));
    }
    if (pool.timeout_ms < 1) return fail(key + ".timeout_ms", "must be at least 1");
    if (pool.wait_replicas < 0 || pool.wait_replicas > kMaxWaitReplicas) {
      return fail(key + ".wait_replicas",
                  "must be between 0 and " + std::to_string(kMaxWaitReplicas));
    }
    if (pool.wait_timeout_ms < 1) return fail(key + ".wait_timeout_ms", "must be at least 1");
  }
  // docs/commands.md, admin commands: namespaces, tokens and other metadata live in pool "default".
  if (!has_default) {
    return fail("pools.default",
                "is required (deferq keeps its metadata there); add [pools.default] or "
                "--pool default=URL");
  }
  return true;
}

// Keeps exceptions (bad_alloc, anything toml++ throws outside parse) inside this file.
template <typename Fn>
bool NoThrow(std::string* error, Fn&& fn) {
  std::string scratch;
  std::string* err = error != nullptr ? error : &scratch;
  try {
    return fn(err);
  } catch (const std::exception& e) {
    *err = std::string("internal error while reading the configuration: ") + e.what();
  } catch (...) {
    *err = "internal error while reading the configuration";
  }
  return false;
}

}  // namespace

bool LoadConfigString(const std::string& text, const std::string& source_name, Config* cfg,
                      std::string* error) {
  return NoThrow(error, [&](std::string* err) {
    toml::table root;
    try {
      root = toml::parse(std::string_view(text), std::string_view(source_name));
    } catch (const toml::parse_error& e) {
      const toml::source_position& at = e.source().begin;
      *err = source_name + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " +
             std::string(e.description());
      return false;
    }
    Config work = *cfg;
    if (!TomlLoader(source_name, &work, err).Load(root)) return false;
    *cfg = std::move(work);
    return true;
  });
}

bool LoadConfigFile(const std::string& path, Config* cfg, std::string* error) {
  return NoThrow(error, [&](std::string* err) {
    std::string text;
    if (!ReadWholeFile(path, &text, err)) return false;
    Config work = *cfg;
    if (!LoadConfigString(text, path, &work, err)) return false;
    work.config_file = path;
    *cfg = std::move(work);
    return true;
  });
}

bool ParseCommandLine(int argc, const char* const* argv, Config* cfg, CliAction* action,
                      std::string* error) {
  return NoThrow(
      error, [&](std::string* err) { return ParseCommandLineImpl(argc, argv, cfg, action, err); });
}

uint64_t QueryBufferLimit(const Config& cfg) {
  constexpr uint64_t kCommandSlack = 64 * 1024;  // the header lines and other arguments
  return std::max(cfg.max_query_buffer, cfg.max_bulk_len + kCommandSlack);
}

bool ValidateConfig(const Config& cfg, std::string* error) {
  return NoThrow(error, [&](std::string* err) { return ValidateConfigImpl(cfg, err); });
}

std::string UsageText() {
  return R"(Usage: deferq [options]

deferq is a delayed-job server speaking the Redis protocol (RESP), storing jobs in Redis.

Options:
  --config FILE       read settings from the TOML file FILE
  --port N            listen on port N (1-65535; default 6380, keeps server.listen's host)
  --threads N         event-loop threads, 0 = one per core (0-1024; default 0)
  --pool NAME=URL     use the standalone Redis at URL for pool NAME, e.g.
                      --pool default=redis://127.0.0.1:6379 (may be repeated)
  --check-config      load and validate the configuration, then exit
  -h, --help          print this help and exit
  -v, --version       print the version and exit

Options with a value also accept --option=value. Flags override the config file, which
overrides the built-in defaults; --config is read first wherever it appears. With no pool
configured, deferq uses pool 'default' at redis://127.0.0.1:6379.

Configuration file reference: docs/configuration.md
)";
}

}  // namespace deferq
