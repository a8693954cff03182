#include "persist/sentinel.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <string>

#include "persist/upstream_connection.h"
#include "unit/persist/parsed_reply.h"

namespace deferq::persist {
namespace {

TEST(SentinelTest, RoleMasterPasses) {
  EXPECT_EQ(CheckRole(*Parse("*3\r\n$6\r\nmaster\r\n:10\r\n*0\r\n")).kind, SetupVerdict::kPass);
}

TEST(SentinelTest, RoleSlaveIsRefusedAsARoleRefusal) {
  const SetupVerdict v = CheckRole(
      *Parse("*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6379\r\n$9\r\nconnected\r\n:1\r\n"));
  EXPECT_EQ(v.kind, SetupVerdict::kRefuse);
  EXPECT_EQ(v.text.rfind("ROLE is slave, not master", 0), 0u) << v.text;
  EXPECT_TRUE(IsRoleRefusal(v));
  EXPECT_FALSE(IsRoleRefusal(SetupVerdict{SetupVerdict::kRefuse, "maxmemory-policy is x"}));
}

TEST(SentinelTest, RoleErrorIsRefused) {
  EXPECT_EQ(CheckRole(*Parse("-ERR unknown command 'ROLE'\r\n")).kind, SetupVerdict::kRefuse);
}

TEST(SentinelTest, MasterHandshakeChecksRoleBeforeAnythingIsWritten) {
  const Handshake steps = BuildMasterHandshake(RedisUrl{});
  size_t role = steps.size();
  size_t first_write = steps.size();
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].request == "*1\r\n$4\r\nROLE\r\n") role = i;
    if (steps[i].after_checks && first_write == steps.size()) first_write = i;
  }
  ASSERT_LT(role, steps.size());
  ASSERT_LT(first_write, steps.size());
  EXPECT_LT(role, first_write);
  EXPECT_EQ(steps.size(), BuildHandshake(RedisUrl{}).size() + 1);
}

TEST(SentinelTest, SwitchMasterMessageOfOurMasterGivesTheNewAddress) {
  Endpoint ep;
  ASSERT_TRUE(ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.2 6380", "mymaster", &ep));
  EXPECT_EQ(ep.host, "127.0.0.2");
  EXPECT_EQ(ep.port, 6380);
  ASSERT_TRUE(ParseSwitchMaster("m ::1 1 ::1 7000", "m", &ep));
  EXPECT_EQ(ep.host, "::1");
}

TEST(SentinelTest, SwitchMasterMessageOfAnotherMasterOrMalformedIsIgnored) {
  Endpoint ep;
  EXPECT_FALSE(ParseSwitchMaster("other 127.0.0.1 6379 127.0.0.2 6380", "mymaster", &ep));
  EXPECT_FALSE(ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.2", "mymaster", &ep));
  EXPECT_FALSE(ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.2 6380 x", "mymaster", &ep));
  EXPECT_FALSE(ParseSwitchMaster("mymaster 127.0.0.1 6379 127.0.0.2 0", "mymaster", &ep));
  EXPECT_FALSE(ParseSwitchMaster("mymaster 127.0.0.1 6379 redis-2 6380", "mymaster", &ep));
}

TEST(SentinelTest, ReadsAndUpkeepNeedNoReplicaWait) {
  EXPECT_TRUE(NeedsReplicaWait(Script::kPublish));
  EXPECT_TRUE(NeedsReplicaWait(Script::kAck));
  EXPECT_TRUE(NeedsReplicaWait(Script::kConsume));
  EXPECT_FALSE(NeedsReplicaWait(Script::kQstat));
  EXPECT_FALSE(NeedsReplicaWait(Script::kJob));
  EXPECT_FALSE(NeedsReplicaWait(Script::kPump));
  EXPECT_FALSE(NeedsReplicaWait(Script::kCount));
}

}  // namespace
}  // namespace deferq::persist
