// Error replies a client sees for commands the server does not know or calls with the wrong
// number of arguments: byte for byte what Redis 7 writes (docs/commands.md, connection commands).
#include <string>
#include <vector>

#include "integration_test.h"

namespace deferq::testing {
namespace {

using ErrorRepliesTest = RedisParityTest;

TEST_F(ErrorRepliesTest, UnknownCommandTextIsExactlyRedis7s) {
  std::string reply = Transcript(port(), EncodeCommand({"foo", "a", "b"}), 1);
  EXPECT_EQ(Printable(reply),
            Printable("-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n"));
}

TEST_F(ErrorRepliesTest, UnknownCommandRepliesMatchRedisByteForByte) {
  const std::string long_arg(200, 'x');
  const std::vector<std::vector<std::string>> requests = {
      {"foo"},
      {"FOO", "a", "b"},
      {"FooBar", "Mixed", "Case"},
      {"foo", ""},
      {"foo", "with space", "quote'inside"},
      {"foo", long_arg, long_arg},  // arguments are cut at 128 bytes
      {"foo", "1",  "2",  "3",  "4",  "5",  "6",  "7",  "8",  "9",  "10", "11", "12", "13",
       "14",  "15", "16", "17", "18", "19", "20", "21", "22", "23", "24", "25", "26", "27",
       "28",  "29", "30", "31", "32", "33", "34", "35", "36", "37", "38", "39", "40"},
      {std::string(300, 'c')},   // the name is cut at 128 bytes
      {"foo", "line\r\nbreak"},  // CR and LF become spaces in an error line
  };
  for (const auto& args : requests) {
    std::string request = EncodeCommand(args);
    EXPECT_SAME_AS_REDIS(Transcript(port(), request, 1), Transcript(redis_port(), request, 1),
                         request);
  }
}

TEST_F(ErrorRepliesTest, UnknownCommandKeepsTheConnectionUsable) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto unknown = Command(client.get(), {"NOSUCHCOMMAND"});
  ASSERT_NE(unknown, nullptr);
  EXPECT_EQ(unknown->type, REDIS_REPLY_ERROR);
  auto ping = Command(client.get(), {"PING"});
  EXPECT_TRUE(IsStatus(ping.get(), "PONG")) << Describe(ping.get());
}

TEST_F(ErrorRepliesTest, WrongArityRepliesMatchRedisByteForByte) {
  const std::vector<std::vector<std::string>> requests = {
      {"ECHO"},
      {"echo", "a", "b"},
      {"PING", "a", "b"},
      {"SELECT"},
      {"SELECT", "0", "1"},
      {"TIME", "now"},
      {"RESET", "now"},
      {"AUTH"},
      {"CLIENT"},
      {"CLIENT", "SETNAME"},
      {"CLIENT", "GETNAME", "extra"},
      {"CLIENT", "ID", "extra"},
      {"COMMAND", "COUNT", "extra"},
  };
  for (const auto& args : requests) {
    std::string request = EncodeCommand(args);
    EXPECT_SAME_AS_REDIS(Transcript(port(), request, 1), Transcript(redis_port(), request, 1),
                         request);
  }
  // The spec's own example, lower-case command name.
  EXPECT_EQ(Printable(Transcript(port(), "ECHO\r\n", 1)),
            Printable("-ERR wrong number of arguments for 'echo' command\r\n"));
}

TEST_F(ErrorRepliesTest, ErrorsInAPipelineAreAnsweredInPlace) {
  const std::string request = EncodeCommand({"PING"}) + EncodeCommand({"nosuch", "x"}) +
                              EncodeCommand({"ECHO"}) + EncodeCommand({"ECHO", "after"}) +
                              "SELECT 1\r\nPING\r\n";
  std::string ours = Transcript(port(), request, 6);
  EXPECT_EQ(Printable(ours),
            Printable("+PONG\r\n"
                      "-ERR unknown command 'nosuch', with args beginning with: 'x' \r\n"
                      "-ERR wrong number of arguments for 'echo' command\r\n"
                      "$5\r\nafter\r\n"
                      "-ERR DB index is out of range\r\n"
                      "+PONG\r\n"));
}

}  // namespace
}  // namespace deferq::testing
