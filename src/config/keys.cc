#include "config/keys.h"

#include <cstdio>
#include <limits>

#include "base/log.h"
#include "config/job_limits.h"

namespace deferq {

namespace {

using Type = ConfigKey::Type;
constexpr int64_t kU32Max = std::numeric_limits<uint32_t>::max();

// clang-format off
const ConfigKey kKeys[] = {
    {"server", "listen",              Type::kSpecial, {}},
    {"server", "threads",             Type::kInteger, &Config::threads, 0, kMaxThreads},
    {"server", "metrics_listen",      Type::kSpecial, {}},
    {"server", "max_clients",         Type::kInteger, &Config::max_clients, 1, kU32Max},
    {"server", "max_payload",         Type::kInteger, &Config::max_payload, 1, kNoUpperBound},
    {"server", "max_args",            Type::kInteger, &Config::max_args, 1, kNoUpperBound},
    {"server", "max_bulk_len",        Type::kInteger, &Config::max_bulk_len, 1, kNoUpperBound},
    {"server", "max_output_buffer",   Type::kInteger, &Config::max_output_buffer, 1, kNoUpperBound},
    {"server", "max_query_buffer",    Type::kInteger, &Config::max_query_buffer, 1, kNoUpperBound},
    {"server", "timeout",             Type::kInteger, &Config::idle_timeout, 0, kU32Max},
    {"server", "loglevel",            Type::kSpecial, {}},
    {"server", "slowlog_ms",          Type::kInteger, &Config::slowlog_ms, 0, kU32Max},
    {"server", "wheel",               Type::kBoolean, &Config::wheel},
    {"server", "sweep_ms",            Type::kInteger, &Config::sweep_ms, 10, 60000},
    {"server", "lookahead_ms",        Type::kInteger, &Config::lookahead_ms, 0, 60000},
    {"server", "retain_seconds",      Type::kInteger, &Config::retain_seconds, 1, 86400},
    {"server", "cross_instance_wake", Type::kBoolean, &Config::cross_instance_wake},
    {"server", "queue_stats",         Type::kBoolean, &Config::queue_stats},
    {"server", "metrics_max_queues",  Type::kInteger, &Config::metrics_max_queues, 1, 100000},
    {"server", "console",             Type::kBoolean, &Config::console},
    {"server", "console_read_only",   Type::kBoolean, &Config::console_read_only},
    {"tls", "listen",                 Type::kSpecial, {}},
    {"tls", "cert_file",              Type::kString, &Config::tls_cert_file},
    {"tls", "key_file",               Type::kString, &Config::tls_key_file},
    {"tls", "client_ca_file",         Type::kString, &Config::tls_client_ca_file},
    {"tls", "upstream_ca_file",       Type::kString, &Config::tls_upstream_ca_file},
    {"tls", "upstream_cert_file",     Type::kString, &Config::tls_upstream_cert_file},
    {"tls", "upstream_key_file",      Type::kString, &Config::tls_upstream_key_file},
    {"auth", "required",              Type::kBoolean, &Config::auth_required},
    {"auth", "admin_password_env",    Type::kString, &Config::admin_password_env},
    {"auth", "cache_seconds",         Type::kInteger, &Config::auth_cache_seconds, 0, kU32Max},
    {"auth", "timeout",               Type::kInteger, &Config::auth_timeout, 1, 3600},
    {"defaults", "ttl",               Type::kInteger, &Config::default_ttl, 0, kMaxDurationS},
    {"defaults", "tries",             Type::kInteger, &Config::default_tries, 1, kMaxTries},
    {"defaults", "ttr",               Type::kInteger, &Config::default_ttr, 1, kMaxTtrS},
    {"defaults", "timeout",           Type::kSpecial, {}},
};
// clang-format on

}  // namespace

std::span<const ConfigKey> ConfigKeys() { return kKeys; }

const ConfigKey* FindConfigKey(std::string_view section, std::string_view name) {
  for (const ConfigKey& k : kKeys) {
    if (k.section == section && k.name == name) return &k;
  }
  return nullptr;
}

std::string ConfigValueText(const Config& c, const ConfigKey& key) {
  struct Text {
    const Config& c;
    std::string operator()(std::monostate) const { return {}; }
    std::string operator()(int Config::*m) const { return std::to_string(c.*m); }
    std::string operator()(uint32_t Config::*m) const { return std::to_string(c.*m); }
    std::string operator()(uint64_t Config::*m) const { return std::to_string(c.*m); }
    std::string operator()(bool Config::*m) const { return c.*m ? "true" : "false"; }
    std::string operator()(std::string Config::*m) const { return c.*m; }
  };
  if (key.type != Type::kSpecial) return std::visit(Text{c}, key.member);
  if (key.section == "tls" && key.name == "listen") {
    return c.tls_listen_port == 0 ? "off"
                                  : c.tls_listen_host + ":" + std::to_string(c.tls_listen_port);
  }
  if (key.name == "listen") return c.listen_host + ":" + std::to_string(c.listen_port);
  if (key.name == "metrics_listen") return c.metrics_listen.empty() ? "off" : c.metrics_listen;
  if (key.name == "loglevel") return base::LogLevelName(c.log_level);
  // defaults.timeout: seconds, with a fraction when it has one.
  char buf[32];
  snprintf(buf, sizeof(buf), "%g", c.default_timeout);
  return buf;
}

}  // namespace deferq
