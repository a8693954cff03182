// The thread boundary (docs/architecture.md): CLIENT LIST, INFO clients and CLIENT KILL see and
// act on the clients of every loop thread by asking each loop, and a reply written later keeps
// the protocol in force when its command was read.
#include <algorithm>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "integration_test.h"

namespace deferq::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Four loop threads, so connections spread over several loops (SO_REUSEPORT).
class ClientsAcrossThreadsTest : public DeferqTest {
 protected:
  DeferqOptions Options() const override {
    DeferqOptions options;
    options.threads = 4;
    return options;
  }

  // Opens `n` connections and returns them with their CLIENT IDs.
  void OpenClients(size_t n, std::vector<RedisContextPtr>* clients, std::vector<long long>* ids) {
    for (size_t i = 0; i < n; ++i) {
      clients->push_back(Connect());
      ASSERT_NE(clients->back(), nullptr);
      auto id = Command(clients->back().get(), {"CLIENT", "ID"});
      ASSERT_NE(id, nullptr);
      ASSERT_EQ(id->type, REDIS_REPLY_INTEGER) << Describe(id.get());
      ids->push_back(id->integer);
    }
  }

  static std::string ClientList(redisContext* client) {
    auto reply = Command(client, {"CLIENT", "LIST"});
    if (reply == nullptr || reply->type != REDIS_REPLY_STRING)
      return "(" + Describe(reply.get()) + ")";
    return std::string(reply->str, reply->len);
  }

  static bool Lists(const std::string& list, long long id) {
    return list.find("id=" + std::to_string(id) + " ") != std::string::npos;
  }
};

// The fields of an INFO reply ("field:value" lines).
std::map<std::string, std::string> InfoFields(const std::string& info) {
  std::map<std::string, std::string> fields;
  size_t start = 0;
  while (start < info.size()) {
    size_t end = info.find("\r\n", start);
    if (end == std::string::npos) end = info.size();
    std::string line = info.substr(start, end - start);
    start = end + 2;
    size_t colon = line.find(':');
    if (line.empty() || line[0] == '#' || colon == std::string::npos) continue;
    fields[line.substr(0, colon)] = line.substr(colon + 1);
  }
  return fields;
}

TEST_F(ClientsAcrossThreadsTest, ClientListShowsTheClientsOfEveryThread) {
  std::vector<RedisContextPtr> clients;
  std::vector<long long> ids;
  OpenClients(12, &clients, &ids);
  // Every connection, whichever loop accepted it, in the list asked from each of them.
  for (size_t asker = 0; asker < clients.size(); asker += 5) {
    const std::string list = ClientList(clients[asker].get());
    for (long long id : ids) EXPECT_TRUE(Lists(list, id)) << "id " << id << " missing:\n" << list;
  }
}

TEST_F(ClientsAcrossThreadsTest, InfoClientsCountsTheConnectionsOfEveryThread) {
  std::vector<RedisContextPtr> clients;
  std::vector<long long> ids;
  OpenClients(9, &clients, &ids);
  // The harness's readiness probe may still be closing: wait for exactly our nine.
  std::map<std::string, std::string> fields;
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto reply = Command(clients[0].get(), {"INFO", "clients"});
    ASSERT_NE(reply, nullptr);
    ASSERT_EQ(reply->type, REDIS_REPLY_STRING) << Describe(reply.get());
    fields = InfoFields(std::string(reply->str, reply->len));
    if (fields["connected_clients"] == "9") break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(fields["connected_clients"], "9");
  EXPECT_EQ(fields["blocked_clients"], "0");
  EXPECT_EQ(fields.count("client_recent_max_input_buffer"), 1u);
  EXPECT_EQ(fields.count("client_recent_max_output_buffer"), 1u);
}

TEST_F(ClientsAcrossThreadsTest, ClientKillIdClosesTheConnectionOnWhicheverThreadOwnsIt) {
  std::vector<RedisContextPtr> victims;
  std::vector<long long> ids;
  OpenClients(8, &victims, &ids);
  auto killer = Connect();
  ASSERT_NE(killer, nullptr);
  for (size_t i = 0; i < victims.size(); ++i) {
    auto reply = Command(killer.get(), {"CLIENT", "KILL", "ID", std::to_string(ids[i])});
    ASSERT_NE(reply, nullptr);
    EXPECT_EQ(reply->type, REDIS_REPLY_INTEGER) << Describe(reply.get());
    EXPECT_EQ(reply->integer, 1) << "CLIENT KILL ID " << ids[i];
    // The victim's connection is closed: its next command gets no reply.
    EXPECT_EQ(Command(victims[i].get(), {"PING"}), nullptr) << "client " << ids[i] << " still open";
  }
  const std::string list = ClientList(killer.get());
  for (long long id : ids) EXPECT_FALSE(Lists(list, id)) << "killed id " << id << " listed";
  // Nobody left to kill by that id.
  auto again = Command(killer.get(), {"CLIENT", "KILL", "ID", std::to_string(ids[0])});
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->integer, 0) << Describe(again.get());
}

TEST_F(ClientsAcrossThreadsTest, ClientKillAddrOldFormAnswersOkOrNoSuchClient) {
  RawConnection victim(port());
  ASSERT_TRUE(victim.connected());
  auto killer = Connect();
  ASSERT_NE(killer, nullptr);
  const std::string addr = "127.0.0.1:" + std::to_string(victim.local_port());
  auto killed = Command(killer.get(), {"CLIENT", "KILL", addr});
  EXPECT_TRUE(IsStatus(killed.get(), "OK")) << Describe(killed.get());
  RawConnection::End end;
  victim.ReadUntilClosed(3s, &end);
  EXPECT_NE(end, RawConnection::End::kTimeout) << "the killed connection stayed open";
  auto missing = Command(killer.get(), {"CLIENT", "KILL", addr});
  EXPECT_TRUE(IsError(missing.get(), "ERR No such client")) << Describe(missing.get());
}

TEST_F(ClientsAcrossThreadsTest, ClientKillSkipsTheCallerUnlessSkipmeNo) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  auto id = Command(client.get(), {"CLIENT", "ID"});
  ASSERT_NE(id, nullptr);
  const std::string self = std::to_string(id->integer);
  auto skipped = Command(client.get(), {"CLIENT", "KILL", "ID", self});
  ASSERT_NE(skipped, nullptr);
  EXPECT_EQ(skipped->integer, 0) << Describe(skipped.get());
  EXPECT_TRUE(IsStatus(Command(client.get(), {"PING"}).get(), "PONG"));

  // SKIPME no: the caller gets its reply, then the connection closes.
  RawConnection raw(port());
  ASSERT_TRUE(raw.connected());
  std::vector<RespValue> values;
  raw.Send("CLIENT ID\r\n");
  raw.ReadReplies(1, 3s, &values);
  ASSERT_EQ(values.size(), 1u);
  raw.Send(
      EncodeCommand({"CLIENT", "KILL", "ID", std::to_string(values[0].integer), "SKIPME", "no"}));
  RawConnection::End end;
  const std::string rest = raw.ReadUntilClosed(3s, &end);
  EXPECT_EQ(Printable(rest), ":1\\r\\n");
  EXPECT_EQ(end, RawConnection::End::kClosed);
}

TEST_F(ClientsAcrossThreadsTest, ClientKillByUserKillsThatNamespacesClients) {
  auto in_ns = Connect();
  auto other = Connect();
  ASSERT_NE(in_ns, nullptr);
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(IsStatus(Command(in_ns.get(), {"AUTH", "billing", "token"}).get(), "OK"));
  auto killer = Connect();
  ASSERT_NE(killer, nullptr);
  auto reply = Command(killer.get(), {"CLIENT", "KILL", "USER", "billing"});
  ASSERT_NE(reply, nullptr);
  EXPECT_EQ(reply->integer, 1) << Describe(reply.get());
  EXPECT_EQ(Command(in_ns.get(), {"PING"}), nullptr);
  EXPECT_TRUE(IsStatus(Command(other.get(), {"PING"}).get(), "PONG"));
}

// CLIENT KILL's argument errors are Redis 7's, byte for byte.
using ClientKillParityTest = RedisParityTest;

TEST_F(ClientKillParityTest, ClientKillRepliesMatchRedisByteForByte) {
  const std::vector<std::vector<std::string>> requests = {
      {"CLIENT", "KILL", "10.9.9.9:1234"},
      {"CLIENT", "KILL", "ID", "0"},
      {"CLIENT", "KILL", "ID", "x"},
      {"CLIENT", "KILL", "ID", "987654"},
      {"CLIENT", "KILL", "ID"},
      {"CLIENT", "KILL", "ID", "1", "SKIPME", "maybe"},
      {"CLIENT", "KILL", "TYPE", "bogus"},
      {"CLIENT", "KILL", "TYPE", "master"},
      {"CLIENT", "KILL", "NOSUCHFILTER", "1"},
      {"CLIENT", "KILL", "ADDR", "10.9.9.9:1234", "SKIPME", "yes"},
      {"CLIENT", "KILL"},
  };
  for (const auto& args : requests) {
    std::string request = EncodeCommand(args);
    std::string ours = Transcript(port(), request, 1);
    std::string redis = Transcript(redis_port(), request, 1);
    EXPECT_SAME_AS_REDIS(ours, redis, request);
  }
}

// A reply written after a Redis round trip keeps the protocol in force when its command was read.
class ReplyProtocolTest : public RedisParityTest {
 protected:
  DeferqOptions Options() const override { return WithConfig(DefaultPoolToml(redis_port())); }
};

TEST_F(ReplyProtocolTest, QstatPipelinedBeforeHello3IsAnsweredInResp2) {
  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  std::vector<RespValue> values;
  connection.Send("QSTAT q\r\nHELLO 3\r\nQSTAT q\r\n");
  connection.ReadReplies(3, 5s, &values);
  ASSERT_EQ(values.size(), 3u) << Printable(connection.pending());
  EXPECT_EQ(values[0].type, '*') << "QSTAT read under RESP2: " << values[0].Describe();
  EXPECT_EQ(values[1].type, '%') << "HELLO 3 answers in RESP3: " << values[1].Describe();
  EXPECT_EQ(values[2].type, '%') << "QSTAT read under RESP3: " << values[2].Describe();
  // The same figures either way.
  ASSERT_NE(values[0].Find("ready"), nullptr) << values[0].Describe();
  ASSERT_NE(values[2].Find("ready"), nullptr) << values[2].Describe();
  EXPECT_EQ(values[0].Find("ready")->integer, values[2].Find("ready")->integer);
}

TEST_F(ReplyProtocolTest, QstatPipelinedBeforeResetKeepsResp3) {
  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  std::vector<RespValue> values;
  connection.Send("HELLO 3\r\nQSTAT q\r\nRESET\r\nQSTAT q\r\n");
  connection.ReadReplies(4, 5s, &values);
  ASSERT_EQ(values.size(), 4u) << Printable(connection.pending());
  EXPECT_EQ(values[1].type, '%') << values[1].Describe();
  EXPECT_EQ(values[3].type, '*') << values[3].Describe();
}

}  // namespace
}  // namespace deferq::testing
