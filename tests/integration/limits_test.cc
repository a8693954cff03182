// Resource limits (docs/operations.md, failures, [server] config): protocol limits answered at once
// without allocating, max_clients, the output buffer of a client that never reads, the idle
// timeout, and many concurrent connections.
#include <atomic>
#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration_test.h"

namespace deferq::testing {
namespace {

// "connected_clients" from INFO clients, or -1.
int ConnectedClients(redisContext* client) {
  auto reply = Command(client, {"INFO", "clients"});
  if (!reply || reply->type != REDIS_REPLY_STRING) return -1;
  std::string info(reply->str, reply->len);
  size_t field = info.find("connected_clients:");
  if (field == std::string::npos) return -1;
  return std::atoi(info.c_str() + field + std::strlen("connected_clients:"));
}

// Polls INFO until connected_clients equals `expected` (closes are processed asynchronously).
int WaitForConnectedClients(redisContext* client, int expected,
                            std::chrono::milliseconds timeout = 3s) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int count = ConnectedClients(client);
  while (count != expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
    count = ConnectedClients(client);
  }
  return count;
}

using Clock = std::chrono::steady_clock;

long ElapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

constexpr long kMiB = 1024;  // VmRSS is in KiB

// --- protocol limits at their defaults (max_bulk_len 8 MiB, max_args 1,048,576) ---------------

using DefaultLimitsTest = DeferqTest;

TEST_F(DefaultLimitsTest, BulkHeaderOf100GiBIsRefusedAtOnceWithoutAllocating) {
  auto warm = Connect();  // so that the first connection's own setup is not counted
  ASSERT_NE(warm, nullptr);
  ASSERT_TRUE(IsStatus(Command(warm.get(), {"PING"}).get(), "PONG"));
  long rss_before = server_->RssKiB();
  ASSERT_GT(rss_before, 0);

  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  auto start = Clock::now();
  // Only the header: the error must not wait for (or read) a body.
  ASSERT_EQ(connection.Send("*2\r\n$4\r\nECHO\r\n$107374182400\r\n"), 0);
  RawConnection::End end;
  std::string reply = connection.ReadUntilClosed(3s, &end);
  long elapsed_ms = ElapsedMs(start);
  long rss_after = server_->RssKiB();

  EXPECT_EQ(Printable(reply), Printable("-ERR Protocol error: invalid bulk length\r\n"));
  EXPECT_NE(end, RawConnection::End::kTimeout) << "the connection was not closed";
  EXPECT_LT(elapsed_ms, 1000) << "the error took " << elapsed_ms << " ms";
  EXPECT_LT(rss_after - rss_before, 4 * kMiB)
      << "VmRSS grew from " << rss_before << " KiB to " << rss_after << " KiB";
  EXPECT_TRUE(IsStatus(Command(warm.get(), {"PING"}).get(), "PONG"));
}

TEST_F(DefaultLimitsTest, BulkLengthJustOverEightMiBIsRefused) {
  std::string reply = TranscriptUntilClose(
      port(), "*2\r\n$4\r\nECHO\r\n$" + std::to_string(8 * 1024 * 1024 + 1) + "\r\n");
  EXPECT_EQ(Printable(reply), Printable("-ERR Protocol error: invalid bulk length\r\n"));
}

TEST_F(DefaultLimitsTest, MultibulkCountOverMaxArgsIsRefusedAtOnce) {
  std::string reply = TranscriptUntilClose(port(), "*1048577\r\n");
  EXPECT_EQ(Printable(reply), Printable("-ERR Protocol error: invalid multibulk length\r\n"));
}

TEST_F(DefaultLimitsTest, MultibulkCountAtTheLimitDoesNotGrowMemory) {
  auto warm = Connect();
  ASSERT_NE(warm, nullptr);
  ASSERT_TRUE(IsStatus(Command(warm.get(), {"PING"}).get(), "PONG"));
  long rss_before = server_->RssKiB();
  // A legal count, no arguments yet: nothing may be sized by the client's number.
  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  ASSERT_EQ(connection.Send("*1048576\r\n$4\r\nECHO\r\n"), 0);
  std::this_thread::sleep_for(300ms);
  long rss_after = server_->RssKiB();
  EXPECT_LT(rss_after - rss_before, 4 * kMiB)
      << "VmRSS grew from " << rss_before << " KiB to " << rss_after << " KiB";
  EXPECT_EQ(connection.ReadReplies(1, 100ms), "") << "no reply is due yet";
  EXPECT_TRUE(IsStatus(Command(warm.get(), {"PING"}).get(), "PONG"));
}

// --- lowered protocol limits --------------------------------------------------------------------

class LoweredLimitsTest : public DeferqTest {
 protected:
  DeferqOptions Options() const override {
    return WithConfig(
        "[server]\n"
        "max_args = 16\n"
        "max_payload = 1024\n"
        "max_bulk_len = 4096\n");
  }
};

TEST_F(LoweredLimitsTest, MultibulkCountOverMaxArgsIsRefusedAtOnce) {
  RawConnection connection(port());
  ASSERT_TRUE(connection.connected());
  ASSERT_EQ(connection.Send("*17\r\n"), 0);
  RawConnection::End end;
  std::string reply = connection.ReadUntilClosed(3s, &end);
  EXPECT_EQ(Printable(reply), Printable("-ERR Protocol error: invalid multibulk length\r\n"));
  EXPECT_NE(end, RawConnection::End::kTimeout) << "the connection was not closed";
}

TEST_F(LoweredLimitsTest, MultibulkCountAtMaxArgsIsAccepted) {
  std::vector<std::string> args = {"nosuch"};
  for (int i = 1; i < 16; ++i) args.push_back(std::to_string(i));
  std::string reply = Transcript(port(), EncodeCommand(args) + "PING\r\n", 2);
  EXPECT_EQ(reply.rfind("-ERR unknown command 'nosuch'", 0), 0u) << Printable(reply);
  EXPECT_NE(reply.find("+PONG\r\n"), std::string::npos) << Printable(reply);
}

TEST_F(LoweredLimitsTest, BulkLengthOverMaxBulkLenIsRefusedAtOnce) {
  for (const std::string& request :
       {std::string("*2\r\n$4\r\nECHO\r\n$4097\r\n"), std::string("*1\r\n$4097\r\n")}) {
    RawConnection connection(port());
    ASSERT_TRUE(connection.connected());
    auto start = Clock::now();
    ASSERT_EQ(connection.Send(request), 0);
    RawConnection::End end;
    std::string reply = connection.ReadUntilClosed(3s, &end);
    EXPECT_EQ(Printable(reply), Printable("-ERR Protocol error: invalid bulk length\r\n"))
        << Printable(request);
    EXPECT_NE(end, RawConnection::End::kTimeout) << "the connection was not closed";
    EXPECT_LT(ElapsedMs(start), 1000);
  }
}

TEST_F(LoweredLimitsTest, BulkOfExactlyMaxBulkLenIsAccepted) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::string payload(4096, 'z');
  auto reply = Command(client.get(), {"ECHO", payload});
  EXPECT_TRUE(IsBulk(reply.get(), payload)) << Describe(reply.get()).substr(0, 200);
}

// --- a client that never reads ------------------------------------------------------------------

class SlowReaderTest : public DeferqTest {
 protected:
  DeferqOptions Options() const override {
    return WithConfig("[server]\nmax_output_buffer = 1048576\n");
  }
};

TEST_F(SlowReaderTest, ClientThatNeverReadsIsDisconnectedAndServerMemoryStaysBounded) {
  auto observer = Connect();
  ASSERT_NE(observer, nullptr);
  ASSERT_TRUE(IsStatus(Command(observer.get(), {"PING"}).get(), "PONG"));
  long rss_before = server_->RssKiB();
  long rss_peak = rss_before;

  // A small receive buffer keeps the kernel from absorbing the replies on our side.
  RawConnection hog(port(), /*receive_buffer=*/16 * 1024);
  ASSERT_TRUE(hog.connected());
  const std::string command = EncodeCommand({"ECHO", std::string(64 * 1024, 'h')});
  // Up to 256 MiB of replies owed; the server must drop us long before.
  constexpr int kMaxCommands = 4096;
  auto deadline = Clock::now() + 20s;
  int sent = 0;
  int error = 0;
  while (sent < kMaxCommands && Clock::now() < deadline) {
    error = hog.SendWithoutReading(
        command, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    if (error != 0) break;
    ++sent;
    if (sent % 8 == 0) rss_peak = std::max(rss_peak, server_->RssKiB());
  }
  rss_peak = std::max(rss_peak, server_->RssKiB());

  EXPECT_TRUE(error == EPIPE || error == ECONNRESET || error == ESHUTDOWN)
      << "after " << sent << " commands (" << sent / 16
      << " MiB of replies owed) the send ended with: "
      << (error ? std::strerror(error) : "no error, the server never disconnected us");
  EXPECT_LT(rss_peak - rss_before, 32 * kMiB)
      << "VmRSS went from " << rss_before << " KiB to a peak of " << rss_peak << " KiB";

  // Others are still served, and the hog no longer counts as a client.
  EXPECT_TRUE(IsStatus(Command(observer.get(), {"PING"}).get(), "PONG"));
  EXPECT_EQ(WaitForConnectedClients(observer.get(), 1), 1);
  RawConnection later(port());
  ASSERT_TRUE(later.connected());
  EXPECT_EQ(Printable(later.Exchange("PING\r\n", 1)), "+PONG\\r\\n");
}

// --- max_clients --------------------------------------------------------------------------------

class MaxClientsTest : public DeferqTest {
 protected:
  DeferqOptions Options() const override { return WithConfig("[server]\nmax_clients = 8\n"); }
};

TEST_F(MaxClientsTest, ConnectionOverMaxClientsGetsErrorAndIsClosed) {
  std::vector<RedisContextPtr> clients;
  clients.push_back(Connect());
  ASSERT_NE(clients[0], nullptr);
  // The harness's readiness probe must be gone before we fill every slot.
  ASSERT_EQ(WaitForConnectedClients(clients[0].get(), 1), 1);
  for (int i = 1; i < 8; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
    auto pong = Command(clients.back().get(), {"PING"});
    ASSERT_TRUE(IsStatus(pong.get(), "PONG")) << "client " << i << ": " << Describe(pong.get());
  }

  // The ninth is told why without having to send anything, then closed.
  RawConnection extra(port());
  ASSERT_TRUE(extra.connected());
  RawConnection::End end;
  std::string reply = extra.ReadUntilClosed(3s, &end);
  EXPECT_EQ(Printable(reply), Printable("-ERR max number of clients reached\r\n"));
  EXPECT_NE(end, RawConnection::End::kTimeout) << "the connection was not closed";

  // The eight are unaffected.
  for (auto& client : clients) {
    EXPECT_TRUE(IsStatus(Command(client.get(), {"PING"}).get(), "PONG"));
  }
}

TEST_F(MaxClientsTest, SlotFreedByAClosedClientCanBeReused) {
  std::vector<RedisContextPtr> clients;
  clients.push_back(Connect());
  ASSERT_NE(clients[0], nullptr);
  ASSERT_EQ(WaitForConnectedClients(clients[0].get(), 1), 1);
  for (int i = 1; i < 8; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
    ASSERT_TRUE(IsStatus(Command(clients.back().get(), {"PING"}).get(), "PONG"));
  }
  clients.pop_back();
  ASSERT_EQ(WaitForConnectedClients(clients[0].get(), 7), 7);
  RawConnection again(port());
  ASSERT_TRUE(again.connected());
  EXPECT_EQ(Printable(again.Exchange("PING\r\n", 1)), "+PONG\\r\\n");
}

// --- idle timeout -------------------------------------------------------------------------------

class IdleTimeoutTest : public DeferqTest {
 protected:
  DeferqOptions Options() const override { return WithConfig("[server]\ntimeout = 1\n"); }
};

TEST_F(IdleTimeoutTest, IdleClientIsClosedAfterTimeoutWhileActiveClientStays) {
  auto active = Connect();
  ASSERT_NE(active, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int> active_failures{0};
  std::thread pinger([&] {
    while (!stop) {
      if (!IsStatus(Command(active.get(), {"PING"}).get(), "PONG")) ++active_failures;
      std::this_thread::sleep_for(200ms);
    }
  });

  RawConnection idle(port());
  ASSERT_TRUE(idle.connected());
  ASSERT_EQ(Printable(idle.Exchange("PING\r\n", 1)), "+PONG\\r\\n");
  auto last_activity = Clock::now();
  RawConnection::End end;
  std::string rest = idle.ReadUntilClosed(5s, &end);
  long idle_ms = ElapsedMs(last_activity);
  std::this_thread::sleep_for(500ms);  // the active client outlives the idle one
  stop = true;
  pinger.join();

  EXPECT_NE(end, RawConnection::End::kTimeout) << "idle client still open after 5 s";
  EXPECT_EQ(rest, "");
  EXPECT_GE(idle_ms, 900) << "closed before the timeout";
  EXPECT_LE(idle_ms, 3500) << "closed long after the timeout";
  EXPECT_EQ(active_failures, 0) << "an active client was disturbed";
  EXPECT_TRUE(IsStatus(Command(active.get(), {"PING"}).get(), "PONG"));
}

// --- many clients -------------------------------------------------------------------------------

using ConcurrentClientsTest = DeferqTest;

TEST_F(ConcurrentClientsTest, ThousandConcurrentConnectionsEachGetTheirOwnReplies) {
  constexpr int kClients = 1000;
  std::vector<RedisContextPtr> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(ConnectHiredis(port()));
    ASSERT_NE(clients.back(), nullptr) << "connection " << i;
  }
  // Every connection has a request in flight before any reply is read.
  for (int i = 0; i < kClients; ++i) {
    AppendCommand(clients[i].get(), {"CLIENT", "ID"});
    AppendCommand(clients[i].get(), {"ECHO", "connection-" + std::to_string(i)});
    ASSERT_TRUE(Flush(clients[i].get())) << "connection " << i << ": " << clients[i]->errstr;
  }
  std::set<long long> ids;
  for (int i = 0; i < kClients; ++i) {
    auto id = GetReply(clients[i].get());
    auto echo = GetReply(clients[i].get());
    ASSERT_NE(id, nullptr) << "connection " << i << ": " << clients[i]->errstr;
    ASSERT_EQ(id->type, REDIS_REPLY_INTEGER) << "connection " << i << ": " << Describe(id.get());
    EXPECT_TRUE(ids.insert(id->integer).second) << "duplicate CLIENT ID " << id->integer;
    EXPECT_TRUE(IsBulk(echo.get(), "connection-" + std::to_string(i)))
        << "connection " << i << ": " << Describe(echo.get());
  }
  auto observer = Connect();
  ASSERT_NE(observer, nullptr);
  EXPECT_EQ(WaitForConnectedClients(observer.get(), kClients + 1), kClients + 1);
  clients.clear();
  EXPECT_EQ(WaitForConnectedClients(observer.get(), 1, 5s), 1);
}

}  // namespace
}  // namespace deferq::testing
