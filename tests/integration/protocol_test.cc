// The wire protocol (docs/commands.md, connection commands): pipelining, inline commands with
// Redis's quoting, malformed input (exact Redis 7 error, then close), and half-closed connections.
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "integration_test.h"

namespace deferq::testing {
namespace {

using ProtocolTest = RedisParityTest;

// Command i of a mixed pipeline and the exact reply it must get. Payloads differ per command so
// that an out-of-order or repeated reply cannot go unnoticed.
struct PipelinedCommand {
  std::vector<std::string> args;
  std::string reply;
};

PipelinedCommand MakePipelinedCommand(int i) {
  std::string payload = "payload-" + std::to_string(i) + "-";
  payload.append(static_cast<size_t>((i * 7) % 500), static_cast<char>('a' + i % 26));
  std::string bulk = "$" + std::to_string(payload.size()) + "\r\n" + payload + "\r\n";
  switch (i % 3) {
    case 0:
      return {{"PING"}, "+PONG\r\n"};
    case 1:
      return {{"PING", payload}, bulk};
    default:
      return {{"ECHO", payload}, bulk};
  }
}

TEST_F(ProtocolTest, TenThousandPipelinedCommandsAreAnsweredInOrder) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  constexpr int kCommands = 10000;
  for (int i = 0; i < kCommands; ++i) AppendCommand(client.get(), MakePipelinedCommand(i).args);
  for (int i = 0; i < kCommands; ++i) {
    auto reply = GetReply(client.get());
    ASSERT_NE(reply, nullptr) << "reply " << i << ": " << client->errstr;
    PipelinedCommand expected = MakePipelinedCommand(i);
    RespValue value;
    size_t consumed = 0;
    ASSERT_EQ(ParseReply(expected.reply, &value, &consumed), ParseStatus::kOk);
    if (value.type == '+') {
      ASSERT_TRUE(IsStatus(reply.get(), value.str))
          << "reply " << i << ": " << Describe(reply.get());
    } else {
      ASSERT_TRUE(IsBulk(reply.get(), value.str)) << "reply " << i << ": " << Describe(reply.get());
    }
  }
}

TEST_F(ProtocolTest, PipelineSentInOneWriteGetsExactRepliesInOrder) {
  // RESP and inline commands interleaved in one buffer, as a proxy might forward them.
  constexpr int kCommands = 10000;
  std::string request;
  std::string expected;
  for (int i = 0; i < kCommands; ++i) {
    PipelinedCommand command = MakePipelinedCommand(i);
    if (i % 5 == 4) {
      request += command.args[0];
      for (size_t a = 1; a < command.args.size(); ++a) request += " " + command.args[a];
      request += "\r\n";
    } else {
      request += EncodeCommand(command.args);
    }
    expected += command.reply;
  }
  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  ASSERT_EQ(connection.Send(request, 20s), 0);
  std::string replies = connection.ReadReplies(kCommands, 20s);
  ASSERT_EQ(replies.size(), expected.size()) << "got " << CountReplies(replies) << " replies";
  EXPECT_TRUE(replies == expected)
      << "replies differ from position "
      << std::mismatch(replies.begin(), replies.end(), expected.begin()).first - replies.begin();
}

TEST_F(ProtocolTest, CommandsSplitAcrossManyWritesAreParsed) {
  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  const std::string request =
      EncodeCommand({"ECHO", "split across writes"}) + "PING inline\r\n" + EncodeCommand({"PING"});
  for (char byte : request) {
    ASSERT_EQ(connection.Send(std::string_view(&byte, 1)), 0);
    std::this_thread::sleep_for(1ms);
  }
  std::string replies = connection.ReadReplies(3);
  EXPECT_EQ(Printable(replies),
            Printable("$19\r\nsplit across writes\r\n$6\r\ninline\r\n+PONG\r\n"));
}

TEST_F(ProtocolTest, InlineCommandsFollowRedisQuotingRules) {
  const std::string request =
      "ECHO \"hello world\"\r\n"
      "ECHO 'single quoted'\r\n"
      "ECHO \"a\\x41b\\n\\t\\\"q\\\"\"\r\n"
      "ECHO 'it\\'s'\r\n"
      "   PING   \r\n"
      "\r\n"
      "echo bare\n"
      "PING \"a b\"\r\n"
      "ECHO \"\"\r\n"
      "ECHO \"caf\\xc3\\xa9\"\r\n";
  constexpr size_t kReplies = 9;  // the empty line gets none
  std::string ours = Transcript(port(), request, kReplies);
  EXPECT_SAME_AS_REDIS(ours, Transcript(redis_port(), request, kReplies), request);
  EXPECT_EQ(Printable(ours), Printable("$11\r\nhello world\r\n"
                                       "$13\r\nsingle quoted\r\n"
                                       "$8\r\naAb\n\t\"q\"\r\n"
                                       "$4\r\nit's\r\n"
                                       "+PONG\r\n"
                                       "$4\r\nbare\r\n"
                                       "$3\r\na b\r\n"
                                       "$0\r\n\r\n"
                                       "$5\r\ncaf\xc3\xa9\r\n"));
}

TEST_F(ProtocolTest, InlineAndMultibulkCommandsMixInOnePipeline) {
  std::string ours =
      Transcript(port(), "PING\r\n" + EncodeCommand({"ECHO", "hi"}) + "ECHO there\r\n", 3);
  EXPECT_EQ(Printable(ours), Printable("+PONG\r\n$2\r\nhi\r\n$5\r\nthere\r\n"));
}

TEST_F(ProtocolTest, MalformedRequestsGetRedisProtocolErrorThenClose) {
  const std::vector<std::string> requests = {
      "*abc\r\n",
      "*1\r\n:5\r\n",
      "*1\r\n+PING\r\n",
      "*1\r\n$abc\r\n",
      "*1\r\n$-1\r\n",
      "*2\r\n$4\r\nECHO\r\n$3\r\nabc\r\n*1\r\nx\r\n",  // the good command is answered first
      "*2147483648\r\n",
      "*1\r\n$107374182400\r\n",
      "ECHO \"abc\r\n",
      "ECHO \"abc\"x\r\n",
      "ECHO 'it''s'\r\nPING\r\n",
      std::string(70000, 'A'),              // inline line without end over 64 KiB
      "*" + std::string(70000, '1'),        // multibulk count without end
      "*1\r\n$" + std::string(70000, '1'),  // bulk length without end
  };
  for (const std::string& request : requests) {
    std::string ours = TranscriptUntilClose(port(), request);
    std::string redis = TranscriptUntilClose(redis_port(), request);
    EXPECT_SAME_AS_REDIS(ours, redis, request.substr(0, 60));
    EXPECT_NE(ours.find("-ERR Protocol error: "), std::string::npos)
        << Printable(request.substr(0, 60)) << " => " << Printable(ours);
  }
}

TEST_F(ProtocolTest, GarbageAfterAHeaderPrefixGetsTheExactProtocolError) {
  std::mt19937 random(20240601);
  auto printable = [&](bool no_digit) {
    static const std::string letters =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#%&()+,./;<=>?@[]^_`{|}~ ";
    static const std::string all = letters + "0123456789:\"'";
    const std::string& pool = no_digit ? letters : all;
    return pool[random() % pool.size()];
  };
  for (int round = 0; round < 20; ++round) {
    std::string tail;
    for (int i = 0; i < 1 + static_cast<int>(random() % 40); ++i) tail += printable(false);
    // "*" then something that is not a number.
    std::string bad_count = std::string("*") + printable(true) + tail + "\r\n";
    std::string ours = TranscriptUntilClose(port(), bad_count);
    EXPECT_EQ(Printable(ours), Printable("-ERR Protocol error: invalid multibulk length\r\n"))
        << Printable(bad_count);
    EXPECT_SAME_AS_REDIS(ours, TranscriptUntilClose(redis_port(), bad_count), bad_count);

    // An array element that is not a bulk string.
    char first = printable(false);
    if (first == '$') first = '%';
    std::string bad_element = std::string("*1\r\n") + first + tail + "\r\n";
    ours = TranscriptUntilClose(port(), bad_element);
    EXPECT_EQ(Printable(ours),
              Printable(std::string("-ERR Protocol error: expected '$', got '") + first + "'\r\n"))
        << Printable(bad_element);
    EXPECT_SAME_AS_REDIS(ours, TranscriptUntilClose(redis_port(), bad_element), bad_element);
  }
}

TEST_F(ProtocolTest, RandomBytesGetOnlyErrorRepliesAndNeverTakeTheServerDown) {
  std::mt19937 random(7);
  for (int round = 0; round < 24; ++round) {
    std::string garbage;
    // Half the rounds start like a real command, so the garbage reaches the bulk parser too.
    if (round % 2 == 1) garbage = "*3\r\n$4\r\nECHO\r\n$";
    size_t size = 256 + random() % 4096;
    while (garbage.size() < size) garbage.push_back(static_cast<char>(random() & 0xff));

    RawConnection connection(port());
    ASSERT_TRUE(connection.connected());
    connection.Send(garbage, 5s);
    connection.ShutdownWrite();
    RawConnection::End end;
    std::string replies = connection.ReadUntilClosed(5s, &end);
    EXPECT_NE(end, RawConnection::End::kTimeout) << "round " << round << ": still open after EOF";
    // Every byte received belongs to a complete error reply; a protocol error comes last.
    std::vector<RespValue> values;
    CountReplies(replies, &values);
    std::string reencoded;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_TRUE(values[i].IsError()) << "round " << round << ": " << values[i].Describe();
      if (i + 1 < values.size()) {
        EXPECT_NE(values[i].str.rfind("ERR Protocol error", 0), 0u)
            << "round " << round << ": a protocol error must be the last reply";
      }
      reencoded += "-" + values[i].str + "\r\n";
    }
    EXPECT_EQ(Printable(reencoded), Printable(replies)) << "round " << round;
    ASSERT_TRUE(server_->Running()) << "server died on round " << round;
  }
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto pong = Command(client.get(), {"PING"});
  EXPECT_TRUE(IsStatus(pong.get(), "PONG")) << Describe(pong.get());
}

TEST_F(ProtocolTest, HalfClosedClientGetsEveryReplyThenTheConnectionCloses) {
  constexpr int kCommands = 1000;
  std::string request;
  std::string expected;
  for (int i = 0; i < kCommands; ++i) {
    PipelinedCommand command = MakePipelinedCommand(i);
    request += EncodeCommand(command.args);
    expected += command.reply;
  }
  request += "PING last-inline\r\n";
  expected += "$11\r\nlast-inline\r\n";

  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  ASSERT_EQ(connection.Send(request), 0);
  connection.ShutdownWrite();
  RawConnection::End end;
  std::string replies = connection.ReadUntilClosed(10s, &end);
  EXPECT_EQ(end, RawConnection::End::kClosed);
  EXPECT_EQ(replies.size(), expected.size()) << "got " << CountReplies(replies) << " replies";
  EXPECT_TRUE(replies == expected);
}

TEST_F(ProtocolTest, HalfClosedClientGetsLargeRepliesBeyondSocketBuffersThenClose) {
  // 200 x 64 KiB = 12.5 MiB of replies, far more than the kernel buffers between us.
  constexpr int kCommands = 200;
  std::string request;
  std::string expected;
  for (int i = 0; i < kCommands; ++i) {
    std::string payload(64 * 1024, static_cast<char>('A' + i % 26));
    payload.replace(0, std::to_string(i).size(), std::to_string(i));
    request += EncodeCommand({"ECHO", payload});
    expected += "$" + std::to_string(payload.size()) + "\r\n" + payload + "\r\n";
  }
  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  ASSERT_EQ(connection.Send(request, 20s), 0);
  connection.ShutdownWrite();
  RawConnection::End end;
  std::string replies = connection.ReadUntilClosed(20s, &end);
  EXPECT_EQ(end, RawConnection::End::kClosed);
  EXPECT_EQ(CountReplies(replies), static_cast<size_t>(kCommands));
  EXPECT_TRUE(replies == expected);
}

TEST_F(ProtocolTest, HalfClosedInlinePingIsAnsweredLikeRedis) {
  for (uint16_t server_port : {port(), redis_port()}) {
    RawConnection connection(server_port);
    ASSERT_TRUE(connection.connected());
    ASSERT_EQ(connection.Send("PING\r\n"), 0);
    connection.ShutdownWrite();
    RawConnection::End end;
    std::string replies = connection.ReadUntilClosed(5s, &end);
    EXPECT_EQ(Printable(replies), "+PONG\\r\\n") << "port " << server_port;
    EXPECT_EQ(end, RawConnection::End::kClosed) << "port " << server_port;
  }
}

}  // namespace
}  // namespace deferq::testing
