// Tokens (queue/tenancy/tokens.h): libcrypto's SHA-256 against the FIPS 180-2 vectors, token length
// and alphabet, and the constant-time digest comparison.
#include "queue/tenancy/tokens.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace deferq::queue {
namespace {

TEST(TokensTest, DigestHexIsSha256InLowerCaseHex) {
  EXPECT_EQ(DigestHex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(DigestHex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TokensTest, NewTokensHave192RandomBitsInHexAndDiffer) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string t = NewToken();
    ASSERT_EQ(t.size(), 2 * kTokenBytes);
    ASSERT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_GE(kTokenBytes * 8, 128u);
}

TEST(TokensTest, DigestEqualsComparesWholeDigests) {
  const std::string a = DigestHex("token-a");
  EXPECT_TRUE(DigestEquals(a, DigestHex("token-a")));
  EXPECT_FALSE(DigestEquals(a, DigestHex("token-b")));
  std::string last = a;
  last.back() = last.back() == '0' ? '1' : '0';
  EXPECT_FALSE(DigestEquals(a, last));
  EXPECT_FALSE(DigestEquals(a, a.substr(0, 63)));
  EXPECT_FALSE(DigestEquals("", ""));  // an empty digest (no token bound) never matches
}

}  // namespace
}  // namespace deferq::queue
