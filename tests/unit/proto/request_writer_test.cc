#include "proto/request_writer.h"

#include <gtest/gtest.h>

#include <string>

namespace deferq::proto {
namespace {

TEST(RequestWriterTest, CommandIsAnArrayOfBulkStrings) {
  std::string out;
  AppendCommand(&out, {"SET", "k", "v"});
  EXPECT_EQ(out, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
}

TEST(RequestWriterTest, EmptyAndBinaryArgumentsKeepTheirExactBytes) {
  std::string out;
  AppendArrayHeader(&out, 2);
  AppendBulk(&out, "");
  AppendBulk(&out, std::string("a\r\n\0b", 5));
  EXPECT_EQ(out, std::string("*2\r\n$0\r\n\r\n$5\r\na\r\n\0b\r\n", 21));
}

TEST(RequestWriterTest, AppendsAfterWhatIsAlreadyThere) {
  std::string out = "+OK\r\n";
  AppendCommand(&out, {"PING"});
  EXPECT_EQ(out, "+OK\r\n*1\r\n$4\r\nPING\r\n");
}

}  // namespace
}  // namespace deferq::proto
