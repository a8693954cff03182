#include "config_summary.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "base/log.h"

namespace deferq {

namespace {

std::string Join(const std::vector<std::string>& items, bool mask) {
  std::string out;
  for (const std::string& s : items) {
    if (!out.empty()) out += ',';
    out += mask ? MaskUrlPassword(s) : s;
  }
  return out;
}

}  // namespace

std::string MaskUrlPassword(std::string_view url) {
  const size_t scheme = url.find("://");
  const size_t start = scheme == std::string_view::npos ? 0 : scheme + 3;
  const size_t end = std::min(url.find('/', start), url.size());
  const size_t at = url.rfind('@', end);
  if (at == std::string_view::npos || at < start) return std::string(url);
  const size_t colon = url.find(':', start);
  std::string out(url.substr(0, start));
  if (colon != std::string_view::npos && colon < at) {
    out.append(url.substr(start, colon + 1 - start));  // "user:"
  }
  out += "***";
  out.append(url.substr(at));
  return out;
}

std::vector<std::string> DescribeConfig(const Config& c) {
  std::vector<std::string> lines;
  char buf[1024];
  snprintf(buf, sizeof(buf),
           "config: server listen=%s:%u threads=%d metrics_listen=%s max_clients=%u "
           "max_payload=%llu max_args=%llu max_bulk_len=%llu max_output_buffer=%llu "
           "max_query_buffer=%llu timeout=%u loglevel=%s slowlog_ms=%u wheel=%s sweep_ms=%u "
           "lookahead_ms=%u retain_seconds=%u cross_instance_wake=%s queue_stats=%s "
           "metrics_max_queues=%u",
           c.listen_host.c_str(), c.listen_port, c.threads,
           c.metrics_listen.empty() ? "off" : c.metrics_listen.c_str(), c.max_clients,
           static_cast<unsigned long long>(c.max_payload),
           static_cast<unsigned long long>(c.max_args),
           static_cast<unsigned long long>(c.max_bulk_len),
           static_cast<unsigned long long>(c.max_output_buffer),
           static_cast<unsigned long long>(c.max_query_buffer), c.idle_timeout,
           base::LogLevelName(c.log_level), c.slowlog_ms, c.wheel ? "true" : "false", c.sweep_ms,
           c.lookahead_ms, c.retain_seconds, c.cross_instance_wake ? "true" : "false",
           c.queue_stats ? "true" : "false", c.metrics_max_queues);
  lines.emplace_back(buf);
  // Only whether the admin password is set: its value never reaches a log.
  const char* admin = getenv(c.admin_password_env.c_str());
  snprintf(
      buf, sizeof(buf),
      "config: auth required=%s admin_password_env=%s (%s) cache_seconds=%u timeout=%u; defaults "
      "ttl=%u tries=%u ttr=%u timeout=%g",
      c.auth_required ? "true" : "false", c.admin_password_env.c_str(),
      admin != nullptr && admin[0] != '\0' ? "set" : "unset", c.auth_cache_seconds, c.auth_timeout,
      c.default_ttl, c.default_tries, c.default_ttr, c.default_timeout);
  lines.emplace_back(buf);
  for (const PoolConfig& p : c.pools) {
    std::string where;
    if (!p.addr.empty()) {
      where = "addr=" + MaskUrlPassword(p.addr);
    } else if (!p.cluster.empty()) {
      where = "cluster=" + Join(p.cluster, true);
    } else {
      where = "sentinels=" + Join(p.sentinels, true) + " master=" + p.master;
      // Passwords only as set/unset.
      if (!p.sentinel_password.empty()) where += " sentinel_password=(set)";
      if (!p.master_password.empty()) where += " master_password=(set)";
    }
    if (p.wait_replicas > 0) {
      where += " wait_replicas=" + std::to_string(p.wait_replicas) +
               " wait_timeout_ms=" + std::to_string(p.wait_timeout_ms);
    }
    snprintf(buf, sizeof(buf), "config: pool '%s' %s connections_per_thread=%d timeout_ms=%d",
             p.name.c_str(), where.c_str(), p.connections_per_thread, p.timeout_ms);
    lines.emplace_back(buf);
  }
  if (!c.queue_shards.empty()) {
    std::string shards;
    for (const auto& [tag, n] : c.queue_shards) {
      shards += (shards.empty() ? "" : " ") + tag + "=" + std::to_string(n);
    }
    lines.push_back("config: sharded queues " + shards);
  }
  return lines;
}

}  // namespace deferq
