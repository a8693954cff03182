// Connection commands (docs/commands.md, connection commands): PING, ECHO, QUIT, RESET, SELECT,
// HELLO, AUTH, CLIENT, COMMAND, INFO, TIME. Where the spec says "as in Redis", the bytes are
// compared with a real redis-server answering the same request.
#include <sys/time.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration_test.h"

namespace deferq::testing {
namespace {

using ConnectionCommandsTest = RedisParityTest;

TEST_F(ConnectionCommandsTest, PingRepliesPongAndEchoesItsArgument) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto pong = Command(client.get(), {"PING"});
  EXPECT_TRUE(IsStatus(pong.get(), "PONG")) << Describe(pong.get());
  auto message = Command(client.get(), {"PING", "hello there"});
  EXPECT_TRUE(IsBulk(message.get(), "hello there")) << Describe(message.get());
}

TEST_F(ConnectionCommandsTest, EchoReturnsBinarySafePayloadUnchanged) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::string payload("a\0b\r\nc", 6);
  for (int i = 0; i < 100 * 1024; ++i) payload.push_back(static_cast<char>(i * 31));
  auto reply = Command(client.get(), {"ECHO", payload});
  EXPECT_TRUE(IsBulk(reply.get(), payload));
  auto empty = Command(client.get(), {"ECHO", ""});
  EXPECT_TRUE(IsBulk(empty.get(), "")) << Describe(empty.get());
}

TEST_F(ConnectionCommandsTest, ConnectionCommandRepliesMatchRedisByteForByte) {
  // Each request on a fresh connection; replies whose content is the same in both servers.
  const std::vector<std::vector<std::string>> requests = {
      {"PING"},
      {"ping", "msg"},
      {"ECHO", "hello"},
      {"SELECT", "0"},
      {"SELECT", "x"},
      {"SELECT", "-1"},
      {"SELECT", "16"},
      {"CLIENT", "GETNAME"},
      {"CLIENT", "SETNAME", "worker-1"},
      {"CLIENT", "SETNAME", "has space"},
      {"CLIENT", "SETNAME", "new\nline"},
      {"CLIENT", "NOSUCHSUB"},
      {"COMMAND", "INFO", "nosuchcommand"},
      {"COMMAND", "DOCS", "nosuchcommand"},
      {"COMMAND", "NOSUCHSUB"},
      {"HELLO", "4"},
      {"HELLO", "x"},
      {"HELLO", "3", "SETNAME"},
      {"HELLO", "3", "AUTH", "user"},
  };
  for (const auto& args : requests) {
    std::string request = EncodeCommand(args);
    std::string ours = Transcript(port(), request, 1);
    std::string redis = Transcript(redis_port(), request, 1);
    EXPECT_SAME_AS_REDIS(ours, redis, request);
  }
}

TEST_F(ConnectionCommandsTest, QuitRepliesOkAndClosesBeforeLaterCommands) {
  const std::string request = "PING\r\nQUIT\r\nPING\r\n";
  std::string ours = TranscriptUntilClose(port(), request);
  EXPECT_EQ(Printable(ours), Printable("+PONG\r\n+OK\r\n"));
  EXPECT_SAME_AS_REDIS(ours, TranscriptUntilClose(redis_port(), request), request);
}

TEST_F(ConnectionCommandsTest, SelectZeroIsOkAndEveryOtherIndexIsOutOfRange) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto zero = Command(client.get(), {"SELECT", "0"});
  EXPECT_TRUE(IsStatus(zero.get(), "OK")) << Describe(zero.get());
  for (const char* index : {"1", "15", "16", "-1"}) {
    auto reply = Command(client.get(), {"SELECT", index});
    EXPECT_TRUE(IsError(reply.get(), "ERR DB index is out of range"))
        << "SELECT " << index << ": " << Describe(reply.get());
  }
}

TEST_F(ConnectionCommandsTest, Hello3RepliesWithAMapShapedLikeRedis) {
  RawConnection ours(port());
  RawConnection redis(redis_port());
  ASSERT_TRUE(ours.connected());
  ASSERT_TRUE(redis.connected());
  std::string raw;
  ours.Send("HELLO 3\r\n");
  auto hello = ours.ReadReply(3s, &raw);
  redis.Send("HELLO 3\r\n");
  auto reference = redis.ReadReply();
  ASSERT_TRUE(hello.has_value()) << "no complete reply: " << Printable(ours.pending());
  ASSERT_TRUE(reference.has_value());
  ASSERT_EQ(hello->type, '%') << Printable(raw);

  // Same keys, same order, same value types as Redis.
  ASSERT_EQ(hello->items.size(), reference->items.size()) << hello->Describe();
  for (size_t i = 0; i < reference->items.size(); i += 2) {
    EXPECT_EQ(hello->items[i].str, reference->items[i].str) << hello->Describe();
    EXPECT_EQ(hello->items[i + 1].type, reference->items[i + 1].type)
        << "value of " << reference->items[i].str << ": " << hello->Describe();
  }
  const RespValue* server = hello->Find("server");
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->str, "deferq");
  const RespValue* version = hello->Find("version");
  ASSERT_NE(version, nullptr);
  EXPECT_FALSE(version->str.empty());
  const RespValue* proto = hello->Find("proto");
  ASSERT_NE(proto, nullptr);
  EXPECT_EQ(proto->type, ':');
  EXPECT_EQ(proto->integer, 3);
  const RespValue* modules = hello->Find("modules");
  ASSERT_NE(modules, nullptr);
  EXPECT_TRUE(modules->items.empty());

  // `id` is this connection's CLIENT ID.
  const RespValue* id = hello->Find("id");
  ASSERT_NE(id, nullptr);
  ours.Send("CLIENT ID\r\n");
  auto client_id = ours.ReadReply();
  ASSERT_TRUE(client_id.has_value());
  EXPECT_EQ(client_id->type, ':');
  EXPECT_EQ(client_id->integer, id->integer);
}

TEST_F(ConnectionCommandsTest, HelloWithoutVersionOrWithTwoRepliesFlatArrayWithProto2) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  for (std::vector<std::string> args : {std::vector<std::string>{"HELLO"}, {"HELLO", "2"}}) {
    auto reply = Command(client.get(), args);
    ASSERT_NE(reply, nullptr);
    ASSERT_EQ(reply->type, REDIS_REPLY_ARRAY) << Describe(reply.get());
    ASSERT_EQ(reply->elements, 14u) << Describe(reply.get());
    EXPECT_TRUE(IsBulk(reply->element[0], "server"));
    EXPECT_TRUE(IsBulk(reply->element[1], "deferq"));
    EXPECT_TRUE(IsBulk(reply->element[4], "proto"));
    EXPECT_EQ(reply->element[5]->type, REDIS_REPLY_INTEGER);
    EXPECT_EQ(reply->element[5]->integer, 2);
  }
}

TEST_F(ConnectionCommandsTest, HelloAuthAndSetnameApplyToTheConnection) {
  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  connection.Send("HELLO 3 AUTH default any-token SETNAME worker-7\r\n");
  auto hello = connection.ReadReply();
  ASSERT_TRUE(hello.has_value()) << Printable(connection.pending());
  EXPECT_EQ(hello->type, '%') << hello->Describe();
  std::string name = connection.Exchange("CLIENT GETNAME\r\n", 1);
  EXPECT_EQ(Printable(name), Printable("$8\r\nworker-7\r\n"));
}

TEST_F(ConnectionCommandsTest, Hello4IsRefusedWithNoproto) {
  std::string ours = Transcript(port(), "HELLO 4\r\n", 1);
  EXPECT_EQ(Printable(ours), Printable("-NOPROTO unsupported protocol version\r\n"));
}

TEST_F(ConnectionCommandsTest, NullRepliesAreUnderscoreAfterHello3LikeRedis) {
  // The HELLO reply differs (server, version, id); compare what follows it.
  for (uint16_t server_port : {port(), redis_port()}) {
    RawConnection connection(server_port);
    ASSERT_TRUE(connection.connected());
    std::string hello = connection.Exchange("HELLO 3\r\n", 1);
    ASSERT_FALSE(hello.empty());
    std::string null_name = connection.Exchange("CLIENT GETNAME\r\n", 1);
    EXPECT_EQ(Printable(null_name), Printable("_\r\n")) << "port " << server_port;
  }
}

TEST_F(ConnectionCommandsTest, ResetClearsNameAndReturnsToResp2LikeRedis) {
  std::vector<std::string> transcripts;
  for (uint16_t server_port : {port(), redis_port()}) {
    RawConnection connection(server_port);
    ASSERT_TRUE(connection.connected());
    std::string hello = connection.Exchange("HELLO 3 SETNAME before-reset\r\n", 1);
    ASSERT_FALSE(hello.empty());
    transcripts.push_back(
        connection.Exchange("RESET\r\nCLIENT GETNAME\r\nSELECT 0\r\nPING\r\n", 4));
  }
  EXPECT_EQ(Printable(transcripts[0]), Printable("+RESET\r\n$-1\r\n+OK\r\n+PONG\r\n"));
  EXPECT_EQ(Printable(transcripts[0]), Printable(transcripts[1]));
}

TEST_F(ConnectionCommandsTest, AuthWithoutRequiredAuthAcceptsAnyNamespaceToken) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto reply = Command(client.get(), {"AUTH", "orders", "whatever-token"});
  EXPECT_TRUE(IsStatus(reply.get(), "OK")) << Describe(reply.get());
  auto ping = Command(client.get(), {"PING"});
  EXPECT_TRUE(IsStatus(ping.get(), "PONG")) << Describe(ping.get());
}

TEST_F(ConnectionCommandsTest, ClientSetnameThenGetnameReturnsTheName) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto none = Command(client.get(), {"CLIENT", "GETNAME"});
  ASSERT_NE(none, nullptr);
  EXPECT_EQ(none->type, REDIS_REPLY_NIL) << Describe(none.get());
  auto set = Command(client.get(), {"CLIENT", "SETNAME", "billing-worker"});
  EXPECT_TRUE(IsStatus(set.get(), "OK")) << Describe(set.get());
  auto get = Command(client.get(), {"client", "getname"});
  EXPECT_TRUE(IsBulk(get.get(), "billing-worker")) << Describe(get.get());
  // An empty name clears it, as in Redis.
  auto clear = Command(client.get(), {"CLIENT", "SETNAME", ""});
  EXPECT_TRUE(IsStatus(clear.get(), "OK")) << Describe(clear.get());
  auto cleared = Command(client.get(), {"CLIENT", "GETNAME"});
  ASSERT_NE(cleared, nullptr);
  EXPECT_EQ(cleared->type, REDIS_REPLY_NIL) << Describe(cleared.get());
}

TEST_F(ConnectionCommandsTest, ClientIdIsStablePerConnectionAndUniqueAcrossConnections) {
  std::set<long long> ids;
  for (int i = 0; i < 8; ++i) {
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    auto first = Command(client.get(), {"CLIENT", "ID"});
    auto second = Command(client.get(), {"CLIENT", "ID"});
    ASSERT_NE(first, nullptr);
    ASSERT_NE(second, nullptr);
    ASSERT_EQ(first->type, REDIS_REPLY_INTEGER) << Describe(first.get());
    EXPECT_GT(first->integer, 0);
    EXPECT_EQ(first->integer, second->integer);
    EXPECT_TRUE(ids.insert(first->integer).second) << "id reused: " << first->integer;
  }
}

TEST_F(ConnectionCommandsTest, ClientInfoDescribesThisConnection) {
  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  connection.Send("CLIENT SETNAME info-probe\r\nCLIENT ID\r\nCLIENT INFO\r\n");
  std::vector<RespValue> replies;
  connection.ReadReplies(3, 3s, &replies);
  ASSERT_EQ(replies.size(), 3u) << Printable(connection.pending());
  ASSERT_EQ(replies[1].type, ':');
  ASSERT_EQ(replies[2].type, '$') << replies[2].Describe();
  const std::string& info = replies[2].str;
  std::string id_field = "id=" + std::to_string(replies[1].integer) + " ";
  EXPECT_EQ(info.rfind(id_field, 0), 0u) << info;
  std::string addr = " addr=127.0.0.1:" + std::to_string(connection.local_port()) + " ";
  EXPECT_NE(info.find(addr), std::string::npos) << info;
  EXPECT_NE(info.find(" name=info-probe "), std::string::npos) << info;
  EXPECT_EQ(info.back(), '\n') << info;
  EXPECT_EQ(std::count(info.begin(), info.end(), '\n'), 1) << info;
}

TEST_F(ConnectionCommandsTest, ClientListHasOneLinePerConnection) {
  auto first = Connect();
  auto second = Connect();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(IsStatus(Command(first.get(), {"CLIENT", "SETNAME", "first"}).get(), "OK"));
  ASSERT_TRUE(IsStatus(Command(second.get(), {"CLIENT", "SETNAME", "second"}).get(), "OK"));
  auto first_id = Command(first.get(), {"CLIENT", "ID"});
  auto second_id = Command(second.get(), {"CLIENT", "ID"});
  ASSERT_NE(first_id, nullptr);
  ASSERT_NE(second_id, nullptr);

  // The harness's readiness probe may still be closing: wait for exactly the two clients.
  std::string list;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto reply = Command(first.get(), {"CLIENT", "LIST"});
    ASSERT_NE(reply, nullptr);
    ASSERT_EQ(reply->type, REDIS_REPLY_STRING) << Describe(reply.get());
    list.assign(reply->str, reply->len);
    if (std::count(list.begin(), list.end(), '\n') == 2) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(std::count(list.begin(), list.end(), '\n'), 2) << list;
  EXPECT_NE(list.find("id=" + std::to_string(first_id->integer) + " "), std::string::npos) << list;
  EXPECT_NE(list.find("id=" + std::to_string(second_id->integer) + " "), std::string::npos) << list;
  EXPECT_NE(list.find(" name=first "), std::string::npos) << list;
  EXPECT_NE(list.find(" name=second "), std::string::npos) << list;
}

TEST_F(ConnectionCommandsTest, TimeReturnsCurrentUnixSecondsAndMicroseconds) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  timeval before{};
  ::gettimeofday(&before, nullptr);
  auto reply = Command(client.get(), {"TIME"});
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->type, REDIS_REPLY_ARRAY) << Describe(reply.get());
  ASSERT_EQ(reply->elements, 2u);
  ASSERT_EQ(reply->element[0]->type, REDIS_REPLY_STRING);
  ASSERT_EQ(reply->element[1]->type, REDIS_REPLY_STRING);
  std::string seconds(reply->element[0]->str, reply->element[0]->len);
  std::string micros(reply->element[1]->str, reply->element[1]->len);
  ASSERT_FALSE(seconds.empty());
  ASSERT_FALSE(micros.empty());
  EXPECT_EQ(seconds.find_first_not_of("0123456789"), std::string::npos) << seconds;
  EXPECT_EQ(micros.find_first_not_of("0123456789"), std::string::npos) << micros;
  EXPECT_NEAR(std::stoll(seconds), before.tv_sec, 2);
  EXPECT_LT(std::stoll(micros), 1000000);
}

TEST_F(ConnectionCommandsTest, CommandCountIsPositiveAndEqualsTheCommandList) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto count = Command(client.get(), {"COMMAND", "COUNT"});
  ASSERT_NE(count, nullptr);
  ASSERT_EQ(count->type, REDIS_REPLY_INTEGER) << Describe(count.get());
  EXPECT_GT(count->integer, 0);
  auto list = Command(client.get(), {"COMMAND"});
  ASSERT_NE(list, nullptr);
  ASSERT_EQ(list->type, REDIS_REPLY_ARRAY);
  EXPECT_EQ(static_cast<long long>(list->elements), count->integer);

  std::set<std::string> names;
  for (size_t i = 0; i < list->elements; ++i) {
    const redisReply* entry = list->element[i];
    ASSERT_EQ(entry->type, REDIS_REPLY_ARRAY) << Describe(entry);
    ASSERT_GE(entry->elements, 2u) << Describe(entry);
    ASSERT_EQ(entry->element[0]->type, REDIS_REPLY_STRING) << Describe(entry);
    names.insert(std::string(entry->element[0]->str, entry->element[0]->len));
  }
  for (const char* name : {"ping", "echo", "quit", "reset", "select", "hello", "auth", "client",
                           "command", "info", "time"}) {
    EXPECT_TRUE(names.count(name)) << "COMMAND does not list " << name;
  }
}

TEST_F(ConnectionCommandsTest, CommandInfoReportsTheSameArityAsRedis) {
  auto ours = Connect();
  auto redis = ConnectHiredis(redis_port());
  ASSERT_NE(ours, nullptr);
  ASSERT_NE(redis, nullptr);
  for (const char* name : {"ping", "echo", "quit", "reset", "select", "hello", "auth", "client",
                           "command", "info", "time"}) {
    auto mine = Command(ours.get(), {"COMMAND", "INFO", name});
    auto reference = Command(redis.get(), {"COMMAND", "INFO", name});
    ASSERT_NE(mine, nullptr);
    ASSERT_NE(reference, nullptr);
    ASSERT_EQ(mine->type, REDIS_REPLY_ARRAY) << name << ": " << Describe(mine.get());
    ASSERT_EQ(mine->elements, 1u) << name << ": " << Describe(mine.get());
    const redisReply* entry = mine->element[0];
    ASSERT_EQ(entry->type, REDIS_REPLY_ARRAY) << name << ": " << Describe(mine.get());
    ASSERT_GE(entry->elements, 2u) << name << ": " << Describe(mine.get());
    EXPECT_TRUE(IsBulk(entry->element[0], name)) << Describe(entry);
    ASSERT_EQ(entry->element[1]->type, REDIS_REPLY_INTEGER) << Describe(entry);
    EXPECT_EQ(entry->element[1]->integer, reference->element[0]->element[1]->integer)
        << "arity of " << name;
  }
}

TEST_F(ConnectionCommandsTest, CommandDocsPingReturnsADocWithASummary) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto reply = Command(client.get(), {"COMMAND", "DOCS", "ping"});
  ASSERT_NE(reply, nullptr);
  ASSERT_EQ(reply->type, REDIS_REPLY_ARRAY) << Describe(reply.get());
  ASSERT_EQ(reply->elements, 2u) << Describe(reply.get());
  EXPECT_TRUE(IsBulk(reply->element[0], "ping")) << Describe(reply.get());
  const redisReply* doc = reply->element[1];
  ASSERT_EQ(doc->type, REDIS_REPLY_ARRAY) << Describe(reply.get());
  ASSERT_EQ(doc->elements % 2, 0u) << Describe(doc);
  bool has_summary = false;
  for (size_t i = 0; i + 1 < doc->elements; i += 2) {
    if (IsBulk(doc->element[i], "summary")) {
      has_summary = doc->element[i + 1]->type == REDIS_REPLY_STRING && doc->element[i + 1]->len > 0;
    }
  }
  EXPECT_TRUE(has_summary) << Describe(doc);
}

// Parses "field:value" lines of an INFO reply; records a failure for a line in neither format.
std::map<std::string, std::string> ParseInfo(const std::string& info,
                                             std::vector<std::string>* sections) {
  std::map<std::string, std::string> fields;
  size_t start = 0;
  while (start < info.size()) {
    size_t end = info.find("\r\n", start);
    if (end == std::string::npos) {
      ADD_FAILURE() << "INFO line not terminated by CRLF: " << Printable(info.substr(start));
      break;
    }
    std::string line = info.substr(start, end - start);
    start = end + 2;
    if (line.empty()) continue;
    if (line[0] == '#') {
      sections->push_back(line);
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string::npos) {
      ADD_FAILURE() << "INFO line is neither '# Section' nor 'field:value': " << line;
      continue;
    }
    fields[line.substr(0, colon)] = line.substr(colon + 1);
  }
  return fields;
}

TEST_F(ConnectionCommandsTest, InfoHasClientsSectionCountingConnectedClients) {
  auto first = Connect();
  auto second = Connect();
  auto third = Connect();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  ASSERT_NE(third, nullptr);
  ASSERT_TRUE(IsStatus(Command(second.get(), {"PING"}).get(), "PONG"));
  ASSERT_TRUE(IsStatus(Command(third.get(), {"PING"}).get(), "PONG"));

  std::string info;
  std::map<std::string, std::string> fields;
  std::vector<std::string> sections;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto reply = Command(first.get(), {"INFO"});
    ASSERT_NE(reply, nullptr);
    ASSERT_EQ(reply->type, REDIS_REPLY_STRING) << Describe(reply.get());
    info.assign(reply->str, reply->len);
    sections.clear();
    fields = ParseInfo(info, &sections);
    if (fields["connected_clients"] == "3") break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(std::find(sections.begin(), sections.end(), "# Server"), sections.end()) << info;
  EXPECT_NE(std::find(sections.begin(), sections.end(), "# Clients"), sections.end()) << info;
  EXPECT_EQ(fields["connected_clients"], "3") << info;
  // connected_clients belongs to # Clients.
  size_t clients = info.find("# Clients\r\n");
  size_t field = info.find("\r\nconnected_clients:");
  ASSERT_NE(clients, std::string::npos);
  ASSERT_NE(field, std::string::npos);
  EXPECT_GT(field, clients);
  size_t next_section = info.find("\r\n#", clients);
  EXPECT_TRUE(next_section == std::string::npos || field < next_section) << info;
}

TEST_F(ConnectionCommandsTest, InfoWithASectionNameReturnsOnlyThatSection) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const std::vector<std::pair<std::string, std::string>> cases = {{"server", "# Server"},
                                                                  {"clients", "# Clients"},
                                                                  {"stats", "# Stats"},
                                                                  {"CLIENTS", "# Clients"}};
  for (const auto& [section, header] : cases) {
    auto reply = Command(client.get(), {"INFO", section});
    ASSERT_NE(reply, nullptr);
    ASSERT_EQ(reply->type, REDIS_REPLY_STRING) << Describe(reply.get());
    std::string info(reply->str, reply->len);
    std::vector<std::string> sections;
    ParseInfo(info, &sections);
    EXPECT_EQ(sections, std::vector<std::string>{header}) << "INFO " << section << ":\n" << info;
  }
}

}  // namespace
}  // namespace deferq::testing
