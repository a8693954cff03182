#include "config/summary.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "base/log.h"
#include "config/keys.h"

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

namespace {

// "key=value ..." of every key of `section` (config/keys.h).
std::string SectionText(const Config& c, std::string_view section) {
  std::string out;
  for (const ConfigKey& k : ConfigKeys()) {
    if (k.section != section) continue;
    if (!out.empty()) out += ' ';
    out.append(k.name).append("=").append(ConfigValueText(c, k));
    if (k.name == "admin_password_env") {
      // Only whether the admin password is set: its value never reaches a log.
      const char* admin = getenv(c.admin_password_env.c_str());
      out += admin != nullptr && admin[0] != '\0' ? " (set)" : " (unset)";
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> DescribeConfig(const Config& c) {
  std::vector<std::string> lines;
  char buf[1024];
  lines.push_back("config: server " + SectionText(c, "server"));
  if (c.tls_listen_port != 0 || !c.tls_upstream_ca_file.empty() ||
      !c.tls_upstream_cert_file.empty()) {
    lines.push_back("config: tls " + SectionText(c, "tls"));  // file names, never their contents
  }
  lines.push_back("config: auth " + SectionText(c, "auth") + "; defaults " +
                  SectionText(c, "defaults"));
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
      if (p.tls) where += " tls=true";
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
