// The keys of the [server], [auth] and [defaults] tables, one row each: the one place a key is
// written down. The row drives the file loader (the key's type and range, config/load.cc), the
// startup summary (config/summary.cc) and the test that docs/configuration.md describes every key
// with its default (tests/unit/config_keys_test.cc). Its meaning is written once, in that page.
//
// A key whose value needs more than a type and a range (an address, a log level, seconds with a
// fraction) is kSpecial: the loader has a case for it and ConfigValueText formats it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "config/config.h"

namespace deferq {

// server.threads' largest value (also --threads').
inline constexpr int kMaxThreads = 1024;
// A ConfigKey::max that means "no upper bound" (the loader then says "at least min").
inline constexpr int64_t kNoUpperBound = INT64_MAX;

struct ConfigKey {
  enum class Type { kInteger, kBoolean, kString, kSpecial };
  std::string_view section;  // "server", "auth", "defaults"
  std::string_view name;
  Type type;
  // Where the value lives (kInteger, kBoolean, kString; monostate for kSpecial).
  std::variant<std::monostate, int Config::*, uint32_t Config::*, uint64_t Config::*,
               bool Config::*, std::string Config::*>
      member;
  int64_t min = 0;  // kInteger: the range accepted
  int64_t max = 0;
};

// Every row, in the order the startup summary shows them (by section).
std::span<const ConfigKey> ConfigKeys();
// The row of `section`.`name`, or nullptr.
const ConfigKey* FindConfigKey(std::string_view section, std::string_view name);
// The value of `key` in `c` as the summary and the docs write it: an integer, true/false, a
// string, "host:port" for listen, "off" for an empty metrics_listen, a log level's name.
std::string ConfigValueText(const Config& c, const ConfigKey& key);

}  // namespace deferq
