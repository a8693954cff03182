// The startup summary of the configuration: every setting shown, no secret in it.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "config/summary.h"

namespace deferq {
namespace {

TEST(MaskUrlPasswordTest, HidesThePasswordOfUserAndPasswordUrls) {
  EXPECT_EQ(MaskUrlPassword("redis://dq:s3cret@10.0.0.1:6379/2"), "redis://dq:***@10.0.0.1:6379/2");
  EXPECT_EQ(MaskUrlPassword("redis://:s3cret@h:6379"), "redis://:***@h:6379");
  EXPECT_EQ(MaskUrlPassword("rediss://u:p:with:colons@h:6380"), "rediss://u:***@h:6380");
}

TEST(MaskUrlPasswordTest, TakesAUserInfoWithoutColonForAPassword) {
  EXPECT_EQ(MaskUrlPassword("redis://s3cret@h:6379"), "redis://***@h:6379");
}

TEST(MaskUrlPasswordTest, LeavesUrlsWithoutUserInfoAlone) {
  EXPECT_EQ(MaskUrlPassword("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
  EXPECT_EQ(MaskUrlPassword("h:26379"), "h:26379");
  // An '@' after the authority (in a path) is not user info.
  EXPECT_EQ(MaskUrlPassword("redis://h:1/x@y"), "redis://h:1/x@y");
}

TEST(DescribeConfigTest, ShowsEverySectionAndEveryPoolWithoutSecrets) {
  Config c;
  c.slowlog_ms = 250;
  c.admin_password_env = "DQ_TEST_SUMMARY_ADMIN";
  setenv("DQ_TEST_SUMMARY_ADMIN", "topsecret-admin", 1);
  PoolConfig a;
  a.name = "a";
  a.addr = "redis://u:topsecret-url@h1:6379";
  PoolConfig b;
  b.name = "b";
  b.sentinels = {"s1:26379", "s2:26379"};
  b.master = "mymaster";
  b.sentinel_password = "topsecret-sentinel";
  b.master_password = "topsecret-master";
  b.wait_replicas = 1;
  c.pools = {a, b};
  std::string all;
  for (const std::string& line : DescribeConfig(c)) all += line + "\n";
  unsetenv("DQ_TEST_SUMMARY_ADMIN");
  EXPECT_NE(all.find("config: server listen=127.0.0.1:6380 "), std::string::npos) << all;
  EXPECT_NE(all.find(" slowlog_ms=250 "), std::string::npos) << all;
  EXPECT_NE(all.find("admin_password_env=DQ_TEST_SUMMARY_ADMIN (set)"), std::string::npos) << all;
  EXPECT_NE(all.find("config: pool 'a' addr=redis://u:***@h1:6379 "), std::string::npos) << all;
  EXPECT_NE(all.find("config: pool 'b' sentinels=s1:26379,s2:26379 master=mymaster "
                     "sentinel_password=(set) master_password=(set) wait_replicas=1 "
                     "wait_timeout_ms=1000 "),
            std::string::npos)
      << all;
  EXPECT_EQ(all.find("topsecret"), std::string::npos) << all;
}

}  // namespace
}  // namespace deferq
