#include "persist/handshake.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <string>

#include "persist/scripts.h"
#include "unit/persist/parsed_reply.h"

namespace deferq::persist {
namespace {

std::string Bulk(const std::string& s) {
  return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}

std::string ConfigGet(const std::string& policy) {
  return "*2\r\n" + Bulk("maxmemory-policy") + Bulk(policy);
}

TEST(HandshakeTest, NoevictionPasses) {
  EXPECT_EQ(CheckEvictionPolicy(*Parse(ConfigGet("noeviction"))).kind, SetupVerdict::kPass);
}

TEST(HandshakeTest, EvictingPolicyIsRefusedWithItsName) {
  const SetupVerdict v = CheckEvictionPolicy(*Parse(ConfigGet("allkeys-lru")));
  EXPECT_EQ(v.kind, SetupVerdict::kRefuse);
  EXPECT_EQ(v.text, "maxmemory-policy is allkeys-lru, deferq needs noeviction");
}

TEST(HandshakeTest, UnreadablePolicyIsAWarning) {
  // CONFIG renamed away (some managed Redis): refusing would make the pool unusable.
  const SetupVerdict v = CheckEvictionPolicy(*Parse("-ERR unknown command 'CONFIG'\r\n"));
  EXPECT_EQ(v.kind, SetupVerdict::kWarn);
  EXPECT_NE(v.text.find("noeviction"), std::string::npos);
}

TEST(HandshakeTest, RedisSevenAndLaterPass) {
  for (const char* version : {"7.0.0", "7.0.15", "7.2.4", "8.0.1", "10.1.0"}) {
    const std::string info =
        std::string("# Server\r\nredis_version:") + version + "\r\nredis_mode:standalone\r\n";
    EXPECT_EQ(CheckRedisVersion(*Parse(Bulk(info))).kind, SetupVerdict::kPass) << version;
  }
}

TEST(HandshakeTest, RedisOlderThanSevenIsRefused) {
  const std::string info = "# Server\r\nredis_git_sha1:0\r\nredis_version:6.2.14\r\n";
  const SetupVerdict v = CheckRedisVersion(*Parse(Bulk(info)));
  EXPECT_EQ(v.kind, SetupVerdict::kRefuse);
  EXPECT_EQ(v.text, "Redis 6.2.14 is older than 7.0, which deferq needs");
}

TEST(HandshakeTest, VersionFieldIsMatchedWholeNotByPrefix) {
  // "redis_version_x" is not "redis_version".
  const std::string info = "redis_version_x:1.0\r\nredis_version:7.0.1\r\n";
  EXPECT_EQ(CheckRedisVersion(*Parse(Bulk(info))).kind, SetupVerdict::kPass);
}

TEST(HandshakeTest, AofOffIsAWarningAndAofOnPasses) {
  EXPECT_EQ(CheckPersistence(*Parse(Bulk("# Persistence\r\naof_enabled:0\r\n"))).kind,
            SetupVerdict::kWarn);
  EXPECT_EQ(CheckPersistence(*Parse(Bulk("# Persistence\r\naof_enabled:1\r\n"))).kind,
            SetupVerdict::kPass);
}

TEST(HandshakeTest, AofIsNotJudgedWhileRedisLoadsItsDataset) {
  // A restarting Redis says aof_enabled:0 until it has loaded its AOF: not ready, and no false
  // "AOF is off" warning.
  const SetupVerdict v =
      CheckPersistence(*Parse(Bulk("# Persistence\r\nloading:1\r\naof_enabled:0\r\n")));
  EXPECT_EQ(v.kind, SetupVerdict::kRefuse);
  EXPECT_EQ(v.text, "Redis is loading its dataset into memory");
}

TEST(HandshakeTest, LoadsTheFunctionLibraryAfterTheChecksOnlyWhenThePoolLacksIt) {
  const Handshake steps = BuildHandshake(RedisUrl{"127.0.0.1", 6379, "", "", 0});
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_NE(steps[0].request.find("INFO"), std::string::npos);
  EXPECT_NE(steps[1].request.find("maxmemory-policy"), std::string::npos);
  // The load waits until every check passed: a refused pool gets nothing written.
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i].after_checks, i == 4) << i;
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i].loads_library, i == 4) << i;
  const std::string name = "deferq_" + std::string(GetLibrary().version);
  const SetupStep& list = steps[3];
  EXPECT_EQ(list.request,
            "*4\r\n$8\r\nFUNCTION\r\n$4\r\nLIST\r\n$11\r\nLIBRARYNAME\r\n" + Bulk(name));
  // Listed: the load is skipped (no ~90 KB appended to the AOF per connection, and a full Redis
  // serves the library it has); not listed (or an error): it is loaded.
  const std::string listed = "*1\r\n*2\r\n" + Bulk("library_name") + Bulk(name);
  EXPECT_TRUE(list.check(*Parse(listed)).library_present);
  EXPECT_EQ(list.check(*Parse(listed)).kind, SetupVerdict::kPass);
  EXPECT_FALSE(list.check(*Parse("*0\r\n")).library_present);
  EXPECT_FALSE(list.check(*Parse("-ERR unknown command 'FUNCTION'\r\n")).library_present);
  const SetupStep& load = steps[4];
  EXPECT_EQ(load.request.find("*4\r\n$8\r\nFUNCTION\r\n$4\r\nLOAD\r\n$7\r\nREPLACE\r\n"), 0u);
  EXPECT_NE(load.request.find(GetLibrary().body), std::string::npos);
  EXPECT_EQ(load.check(*Parse(Bulk(name))).kind, SetupVerdict::kPass);
  EXPECT_EQ(load.check(*Parse(Bulk("deferq_0000000000"))).kind, SetupVerdict::kRefuse);
  EXPECT_EQ(load.check(*Parse("-ERR unknown command 'FUNCTION'\r\n")).kind, SetupVerdict::kRefuse);
}

std::string MemoryStats(const std::string& policy, int evicted) {
  return Bulk("# Memory\r\nused_memory:1000\r\nmaxmemory_policy:" + policy +
              "\r\n\r\n# Stats\r\nevicted_keys:" + std::to_string(evicted) + "\r\n");
}

TEST(HandshakeTest, WritesAreRefusedWhileThePolicyEvicts) {
  int64_t evicted = -1;
  EXPECT_EQ(WriteRefusal(*Parse(MemoryStats("noeviction", 0)), &evicted), "");
  EXPECT_EQ(evicted, 0);
  const std::string why = WriteRefusal(*Parse(MemoryStats("allkeys-lru", 0)), &evicted);
  EXPECT_EQ(why.find("maxmemory-policy is allkeys-lru, deferq needs noeviction"), 0u) << why;
  // Fixed: writes are safe again.
  EXPECT_EQ(WriteRefusal(*Parse(MemoryStats("noeviction", 0)), &evicted), "");
}

TEST(HandshakeTest, AnEvictionBetweenTwoReadingsRefusesWritesOnceWhateverThePolicySaysNow) {
  int64_t evicted = -1;
  EXPECT_EQ(WriteRefusal(*Parse(MemoryStats("noeviction", 7)), &evicted), "");  // the baseline
  const std::string why = WriteRefusal(*Parse(MemoryStats("noeviction", 10)), &evicted);
  EXPECT_EQ(why.find("Redis evicted 3 key(s)"), 0u) << why;
  EXPECT_EQ(WriteRefusal(*Parse(MemoryStats("noeviction", 10)), &evicted), "");
  // CONFIG RESETSTAT sets the count back: not an eviction.
  EXPECT_EQ(WriteRefusal(*Parse(MemoryStats("noeviction", 0)), &evicted), "");
  // Without the fields (INFO renamed away, an error) nothing is refused.
  EXPECT_EQ(WriteRefusal(*Parse("-ERR unknown command 'INFO'\r\n"), &evicted), "");
}

TEST(HandshakeTest, AuthAndSelectComeFirstAndRefuseOnError) {
  const Handshake steps = BuildHandshake(RedisUrl{"127.0.0.1", 6379, "app", "secret", 3});
  ASSERT_GE(steps.size(), 2u);
  EXPECT_EQ(steps[0].request, "*3\r\n$4\r\nAUTH\r\n$3\r\napp\r\n$6\r\nsecret\r\n");
  EXPECT_EQ(steps[1].request, "*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n");
  const SetupVerdict v = steps[0].check(*Parse("-WRONGPASS invalid username-password pair\r\n"));
  EXPECT_EQ(v.kind, SetupVerdict::kRefuse);
  EXPECT_EQ(v.text, "AUTH failed: WRONGPASS invalid username-password pair");
  EXPECT_EQ(steps[1].check(*Parse("+OK\r\n")).kind, SetupVerdict::kPass);
}

}  // namespace
}  // namespace deferq::persist
