// The key table (config/keys.h) against the loader and docs/configuration.md: every key loads
// from a file and is refused outside its range, and the page's tables of [server], [auth] and
// [defaults] name exactly the table's keys, each with the default deferq really has.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "config/keys.h"
#include "config/load.h"

namespace deferq {
namespace {

// The rows "| `key` | type | `default` ..." of the "### `[section]`" tables of the page.
std::map<std::string, std::string> DocumentedDefaults() {
  std::ifstream in(std::string(DEFERQ_SOURCE_DIR) + "/docs/configuration.md");
  std::map<std::string, std::string> out;
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.starts_with("### `[")) {
      section = line.substr(6, line.find(']') - 6);
      // [pools.NAME] and [shards.NS] are tables of tables, loaded by code of their own.
      if (section != "server" && section != "tls" && section != "auth" && section != "defaults")
        section.clear();
      continue;
    }
    if (line.starts_with("#")) section.clear();
    if (section.empty() || !line.starts_with("| `")) continue;
    std::vector<std::string> cells;
    std::stringstream row(line);
    std::string cell;
    while (std::getline(row, cell, '|')) cells.push_back(cell);
    if (cells.size() < 4) continue;
    auto ticked = [](const std::string& c) {
      const size_t a = c.find('`'), b = c.find('`', a + 1);
      return a == std::string::npos || b == std::string::npos ? std::string()
                                                              : c.substr(a + 1, b - a - 1);
    };
    std::string def = ticked(cells[3]);
    if (def.size() >= 2 && def.front() == '"' && def.back() == '"') {
      def = def.substr(1, def.size() - 2);
    }
    out[section + "." + ticked(cells[1])] = def;
  }
  return out;
}

TEST(ConfigKeysTest, TheDocsNameEveryKeyWithItsDefault) {
  const std::map<std::string, std::string> documented = DocumentedDefaults();
  ASSERT_FALSE(documented.empty()) << "no key tables found in docs/configuration.md";
  const Config defaults;
  std::set<std::string> keys;
  for (const ConfigKey& k : ConfigKeys()) {
    const std::string key = std::string(k.section) + "." + std::string(k.name);
    keys.insert(key);
    auto it = documented.find(key);
    if (it == documented.end()) {
      ADD_FAILURE() << key << " is not described in docs/configuration.md";
      continue;
    }
    EXPECT_EQ(it->second, ConfigValueText(defaults, k))
        << key << ": the page's default differs from deferq's";
  }
  for (const auto& [key, def] : documented) {
    EXPECT_TRUE(keys.count(key)) << key << " is described but deferq has no such key";
  }
}

TEST(ConfigKeysTest, EveryIntegerKeyLoadsItsRangeAndRefusesPastIt) {
  for (const ConfigKey& k : ConfigKeys()) {
    if (k.type != ConfigKey::Type::kInteger) continue;
    const std::string name = std::string(k.section) + "." + std::string(k.name);
    for (int64_t v : {k.min, k.max}) {
      Config c;
      std::string error;
      const std::string text =
          "[" + std::string(k.section) + "]\n" + std::string(k.name) + " = " + std::to_string(v);
      // max_bulk_len >= max_payload + 1024 ties the two (a cross-key check): their extremes
      // cannot load alone.
      if ((name == "server.max_payload" && v == k.max) ||
          (name == "server.max_bulk_len" && v == k.min)) {
        continue;
      }
      EXPECT_TRUE(LoadConfigString(text, "t.toml", &c, &error))
          << name << " = " << v << ": " << error;
      if (error.empty()) {
        EXPECT_EQ(ConfigValueText(c, k), std::to_string(v)) << name;
      }
    }
    if (k.min > INT64_MIN) {
      Config c;
      std::string error;
      const std::string text = "[" + std::string(k.section) + "]\n" + std::string(k.name) + " = " +
                               std::to_string(k.min - 1);
      EXPECT_FALSE(LoadConfigString(text, "t.toml", &c, &error)) << name;
      EXPECT_NE(error.find("key '" + name + "'"), std::string::npos) << error;
    }
  }
}

}  // namespace
}  // namespace deferq
