// deferq: a delayed-job queue server that speaks RESP. Startup: parse the command line and the
// config file, then hand over to the server until SIGINT/SIGTERM.
#include <cstdio>
#include <string>

#include "base/log.h"
#include "config/build_info.h"
#include "config/load.h"
#include "config/redis_url.h"
#include "config/summary.h"
#include "net/server.h"
#include "schedule/zone.h"

int main(int argc, char** argv) {
  deferq::Config config;
  deferq::CliAction action = deferq::CliAction::kRun;
  std::string error;
  if (!deferq::ParseCommandLine(argc, argv, &config, &action, &error)) {
    DQ_LOG(kError, "%s", error.c_str());
    return 2;
  }
  switch (action) {
    case deferq::CliAction::kHelp:
      fputs(deferq::UsageText().c_str(), stdout);
      return 0;
    case deferq::CliAction::kVersion:
      printf("deferq %s (allocator: %s)\n", deferq::kVersion,
             deferq::AllocatorDescription().c_str());
      return 0;
    case deferq::CliAction::kCheckConfig: {
      printf("deferq: configuration %s is valid\n",
             config.config_file.empty() ? "(defaults)" : config.config_file.c_str());
      // One line per pool; scripts/run reads the default pool's address from here.
      for (const deferq::PoolConfig& pool : config.pools) {
        deferq::RedisUrl url;
        std::string why;
        if (!pool.addr.empty() && deferq::ParseRedisUrl(pool.addr, &url, &why)) {
          const bool v6 = url.host.find(':') != std::string::npos;
          printf("pool %s: standalone %s%s%s:%u\n", pool.name.c_str(), v6 ? "[" : "",
                 url.host.c_str(), v6 ? "]" : "", url.port);
        } else if (!pool.cluster.empty()) {
          printf("pool %s: cluster (%zu seeds)\n", pool.name.c_str(), pool.cluster.size());
        } else {
          printf("pool %s: sentinel master %s\n", pool.name.c_str(), pool.master.c_str());
        }
      }
      // Then the effective settings, as the startup log shows them (no secrets).
      for (const std::string& line : deferq::DescribeConfig(config)) printf("%s\n", line.c_str());
      return 0;
    }
    case deferq::CliAction::kRun:
      break;
  }
  deferq::base::SetMinLogLevel(config.log_level);
  DQ_LOG(kInfo,
         "deferq %s starting: listen=%s:%u threads=%d max_clients=%u pools=%zu "
         "allocator=%s config=%s",
         deferq::kVersion, config.listen_host.c_str(), config.listen_port, config.threads,
         config.max_clients, config.pools.size(), deferq::AllocatorDescription().c_str(),
         config.config_file.empty() ? "(none)" : config.config_file.c_str());
  // A handful of lines once: no rate limit, so a config with many pools is shown whole.
  for (const std::string& line : deferq::DescribeConfig(config)) {
    deferq::base::LogLine(nullptr, deferq::base::LogLevel::kInfo, "%s", line.c_str());
  }
  // CRON ... TZ reads zones from this table; PUBLISH never opens a file.
  const size_t zones = deferq::schedule::LoadSystemZones();
  if (zones == 0) DQ_LOG(kWarning, "no time zones found (tzdata missing?): CRON knows only UTC");
  deferq::net::Server server(config);
  return server.Run();
}
