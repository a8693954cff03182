// ParseRedisUrl: the accepted forms of an upstream address and the reasons for refusing others.
#include "config/redis_url.h"

#include <gtest/gtest.h>

#include <string>

namespace deferq {
namespace {

RedisUrl MustParse(const std::string& text) {
  RedisUrl url;
  std::string error;
  EXPECT_TRUE(ParseRedisUrl(text, &url, &error)) << text << ": " << error;
  return url;
}

std::string ParseError(const std::string& text) {
  RedisUrl url;
  std::string error;
  EXPECT_FALSE(ParseRedisUrl(text, &url, &error)) << text << " was accepted";
  return error;
}

TEST(RedisUrlTest, FullUrlYieldsUserPasswordHostPortAndDb) {
  RedisUrl url = MustParse("redis://alice:s3cret@redis.example.com:7000/3");
  EXPECT_EQ(url.user, "alice");
  EXPECT_EQ(url.password, "s3cret");
  EXPECT_EQ(url.host, "redis.example.com");
  EXPECT_EQ(url.port, 7000);
  EXPECT_EQ(url.db, 3);
}

TEST(RedisUrlTest, HostAloneDefaultsToPort6379AndDb0WithoutCredentials) {
  RedisUrl url = MustParse("redis://10.0.0.5");
  EXPECT_EQ(url.host, "10.0.0.5");
  EXPECT_EQ(url.port, 6379);
  EXPECT_EQ(url.db, 0);
  EXPECT_EQ(url.user, "");
  EXPECT_EQ(url.password, "");
}

TEST(RedisUrlTest, TrailingSlashMeansDb0) {
  RedisUrl url = MustParse("redis://localhost:6380/");
  EXPECT_EQ(url.port, 6380);
  EXPECT_EQ(url.db, 0);
}

TEST(RedisUrlTest, PasswordAloneLeavesUserEmpty) {
  RedisUrl url = MustParse("redis://:hunter2@localhost:6379");
  EXPECT_EQ(url.user, "");
  EXPECT_EQ(url.password, "hunter2");
}

TEST(RedisUrlTest, PercentEscapesInUserAndPasswordAreDecoded) {
  RedisUrl url = MustParse("redis://us%65r:p%40ss%2Fw%3Ard@localhost");
  EXPECT_EQ(url.user, "user");
  EXPECT_EQ(url.password, "p@ss/w:rd");
}

TEST(RedisUrlTest, UnescapedAtInPasswordEndsCredentialsAtTheLastAt) {
  RedisUrl url = MustParse("redis://:a@b@localhost:6379");
  EXPECT_EQ(url.password, "a@b");
  EXPECT_EQ(url.host, "localhost");
}

TEST(RedisUrlTest, SchemeIsCaseInsensitive) {
  EXPECT_EQ(MustParse("REDIS://localhost:1234").port, 1234);
}

TEST(RedisUrlTest, BareHostPortIsAccepted) {
  RedisUrl url = MustParse("cache-1.internal:6390");
  EXPECT_EQ(url.host, "cache-1.internal");
  EXPECT_EQ(url.port, 6390);
  EXPECT_EQ(url.db, 0);
}

TEST(RedisUrlTest, Ipv6InBracketsIsAcceptedInUrlAndBareForms) {
  RedisUrl url = MustParse("redis://:pw@[::1]:7001/2");
  EXPECT_EQ(url.host, "::1");
  EXPECT_EQ(url.port, 7001);
  EXPECT_EQ(url.db, 2);
  RedisUrl bare = MustParse("[fe80::1:2]:6379");
  EXPECT_EQ(bare.host, "fe80::1:2");
  EXPECT_EQ(bare.port, 6379);
  EXPECT_EQ(MustParse("redis://[2001:db8::7]").port, 6379);
}

TEST(RedisUrlTest, HighestPortIsAccepted) { EXPECT_EQ(MustParse("h:65535").port, 65535); }

TEST(RedisUrlTest, EmptyTextIsRejected) { EXPECT_EQ(ParseError(""), "empty address"); }

TEST(RedisUrlTest, EmptyHostIsRejected) {
  EXPECT_EQ(ParseError("redis://"), "empty host");
  EXPECT_EQ(ParseError("redis://:6379"), "empty host");
  EXPECT_EQ(ParseError("redis://:pw@"), "empty host");
  EXPECT_EQ(ParseError(":6379"), "empty host");
  EXPECT_EQ(ParseError("redis://[]:6379"), "empty host");
}

TEST(RedisUrlTest, PortZeroIsOutOfRange) {
  EXPECT_EQ(ParseError("redis://localhost:0"), "port '0' is out of range (1-65535)");
}

TEST(RedisUrlTest, PortAbove65535IsOutOfRange) {
  EXPECT_EQ(ParseError("localhost:65536"), "port '65536' is out of range (1-65535)");
  EXPECT_EQ(ParseError("localhost:99999999999999999999"),
            "port '99999999999999999999' is out of range (1-65535)");
}

TEST(RedisUrlTest, NonNumericPortIsRejected) {
  EXPECT_EQ(ParseError("redis://localhost:abc"), "port 'abc' is not a number");
  EXPECT_EQ(ParseError("redis://localhost:-1"), "port '-1' is not a number");
  EXPECT_EQ(ParseError("redis://localhost:"), "missing port after ':'");
}

TEST(RedisUrlTest, RedissSchemeIsTls) {
  RedisUrl url;
  std::string error;
  ASSERT_TRUE(ParseRedisUrl("rediss://ns:tok@cache.example:6380/2", &url, &error)) << error;
  EXPECT_TRUE(url.tls);
  EXPECT_EQ(url.host, "cache.example");
  EXPECT_EQ(url.port, 6380);
  EXPECT_EQ(url.user, "ns");
  EXPECT_EQ(url.password, "tok");
  EXPECT_EQ(url.db, 2);
  ASSERT_TRUE(ParseRedisUrl("REDISS://h:1", &url, &error));
  EXPECT_TRUE(url.tls);
  ASSERT_TRUE(ParseRedisUrl("redis://h:1", &url, &error));
  EXPECT_FALSE(url.tls);
  ASSERT_TRUE(ParseRedisUrl("h:1", &url, &error));
  EXPECT_FALSE(url.tls);
}

TEST(RedisUrlTest, UnknownSchemeIsNamed) {
  EXPECT_EQ(ParseError("http://localhost:6379"),
            "unknown scheme 'http://' (expected redis:// or rediss://)");
  EXPECT_EQ(ParseError("unix:///tmp/redis.sock"),
            "unknown scheme 'unix://' (expected redis:// or rediss://)");
}

TEST(RedisUrlTest, TrailingJunkAfterPortIsRejected) {
  EXPECT_EQ(ParseError("redis://localhost:6379?db=1"), "unexpected '?db=1' after the port");
  EXPECT_EQ(ParseError("localhost:6379 "), "unexpected ' ' after the port");
  EXPECT_EQ(ParseError("[::1]x"), "unexpected 'x' after host");
}

TEST(RedisUrlTest, TrailingJunkAfterDbIsRejected) {
  EXPECT_EQ(ParseError("redis://localhost/1/2"), "unexpected '/2' after the database number");
  EXPECT_EQ(ParseError("redis://localhost/1?x"), "unexpected '?x' after the database number");
}

TEST(RedisUrlTest, DbMustBeANonNegativeInteger) {
  EXPECT_EQ(ParseError("redis://localhost/-1"), "database '-1' is not a non-negative integer");
  EXPECT_EQ(ParseError("redis://localhost/one"), "database 'one' is not a non-negative integer");
  EXPECT_EQ(ParseError("redis://localhost/99999999999"), "database '99999999999' is out of range");
}

TEST(RedisUrlTest, BareFormRequiresAPort) {
  EXPECT_EQ(ParseError("localhost"), "missing port (expected host:port)");
}

TEST(RedisUrlTest, BareFormRefusesCredentialsAndDb) {
  EXPECT_EQ(ParseError(":pw@localhost:6379"), "empty host");
  EXPECT_EQ(ParseError("pw@localhost:6379"), "credentials need the redis:// form");
  EXPECT_EQ(ParseError("localhost/2"), "a database number needs the redis:// form");
}

TEST(RedisUrlTest, InvalidHostCharacterIsNamed) {
  EXPECT_EQ(ParseError("redis://local host:6379"), "invalid character ' ' in host");
}

TEST(RedisUrlTest, MalformedIpv6IsRejected) {
  EXPECT_EQ(ParseError("redis://[::1:6379"), "missing ']' after IPv6 address");
  EXPECT_EQ(ParseError("[not-v6]:6379"), "'not-v6' is not an IPv6 address");
}

TEST(RedisUrlTest, UserWithoutPasswordIsRejected) {
  EXPECT_EQ(ParseError("redis://alice@localhost"),
            "credentials must be 'user:password@' or ':password@'");
  EXPECT_EQ(ParseError("redis://alice:@localhost"), "empty password");
}

TEST(RedisUrlTest, BadPercentEscapeIsRejected) {
  EXPECT_EQ(ParseError("redis://:ab%zz@localhost"), "bad percent-escape in password");
  EXPECT_EQ(ParseError("redis://u%4:pw@localhost"), "bad percent-escape in user name");
}

TEST(RedisUrlTest, FailureLeavesOutputUntouched) {
  RedisUrl url;
  url.host = "keep";
  std::string error;
  EXPECT_FALSE(ParseRedisUrl("redis://other:0", &url, &error));
  EXPECT_EQ(url.host, "keep");
}

}  // namespace
}  // namespace deferq
