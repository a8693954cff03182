// Graceful shutdown: on SIGTERM or SIGINT deferq stops accepting, flushes every reply it owes,
// and exits with code 0 (docs/commands.md, connection commands contract for the server process).
#include <signal.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "integration_test.h"

namespace deferq::testing {
namespace {

using Clock = std::chrono::steady_clock;

using ShutdownTest = DeferqTest;

// One pipelining client: batches of ECHOs with payloads unique to (client, sequence number),
// each reply checked against what was sent, until the connection ends.
struct LoadClient {
  int index = 0;
  std::atomic<long> received{0};
  std::atomic<long> wrong{0};
  std::string first_wrong;

  void Run(uint16_t port, const std::atomic<bool>& give_up) {
    RedisContextPtr client = ConnectHiredis(port);
    if (!client) return;
    constexpr int kBatch = 100;
    long next = 0;
    while (!give_up) {
      for (int i = 0; i < kBatch; ++i) {
        AppendCommand(client.get(), {"ECHO", Payload(next + i)});
      }
      for (int i = 0; i < kBatch; ++i) {
        ReplyPtr reply = GetReply(client.get());
        if (!reply) return;  // the server closed the connection: expected during shutdown
        if (!IsBulk(reply.get(), Payload(next + i))) {
          if (wrong++ == 0)
            first_wrong = "expected " + Payload(next + i) + ", got " + Describe(reply.get());
        }
        ++received;
      }
      next += kBatch;
    }
  }

  std::string Payload(long sequence) const {
    return "client-" + std::to_string(index) + "-seq-" + std::to_string(sequence);
  }
};

TEST_F(ShutdownTest, SigtermDuringPipelinedLoadExitsZeroAndEveryReceivedReplyIsCorrect) {
  constexpr int kClients = 4;
  std::vector<LoadClient> clients(kClients);
  std::atomic<bool> give_up{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < kClients; ++k) {
    clients[k].index = k;
    threads.emplace_back([&, k] { clients[k].Run(port(), give_up); });
  }
  // Let every client get going before the signal.
  auto deadline = Clock::now() + 5s;
  auto all_started = [&] {
    for (const LoadClient& client : clients) {
      if (client.received < 1000) return false;
    }
    return true;
  };
  while (!all_started() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(all_started()) << "the load did not get going";

  server_->Signal(SIGTERM);
  auto status = server_->WaitForExit(5s);
  give_up = true;
  for (std::thread& thread : threads) thread.join();

  EXPECT_TRUE(ExitedWithCode(status, 0)) << DescribeWaitStatus(status);
  for (const LoadClient& client : clients) {
    EXPECT_GT(client.received, 0) << "client " << client.index;
    EXPECT_EQ(client.wrong, 0) << "client " << client.index << ": " << client.first_wrong;
  }
  RawConnection after(port());
  EXPECT_FALSE(after.connected()) << "still accepting after exit";
}

TEST_F(ShutdownTest, SigtermFlushesRepliesOwedToASlowReaderAndStopsAccepting) {
  // 400 x 32 KiB of replies: far more than the kernel buffers hold, so most is still owed by
  // the server when the signal arrives.
  constexpr int kCommands = 400;
  std::string request;
  std::string expected;
  for (int i = 0; i < kCommands; ++i) {
    std::string payload = "owed-" + std::to_string(i) + "-";
    payload.resize(32 * 1024, 'o');
    request += EncodeCommand({"ECHO", payload});
    expected += "$" + std::to_string(payload.size()) + "\r\n" + payload + "\r\n";
  }
  RawConnection slow(port(), /*receive_buffer=*/16 * 1024);
  ASSERT_TRUE(slow.connected());
  ASSERT_EQ(slow.SendWithoutReading(request, 10s), 0)
      << "the server stopped reading requests while replies were pending";
  std::this_thread::sleep_for(300ms);  // the server reads the last requests

  server_->Signal(SIGTERM);
  std::this_thread::sleep_for(300ms);
  EXPECT_TRUE(server_->Running()) << "exited while it still owed replies: "
                                  << DescribeWaitStatus(server_->wait_status());

  // No new client is served once shutdown began.
  RawConnection late(port());
  if (late.connected()) {
    EXPECT_EQ(Printable(late.Exchange("PING\r\n", 1, 500ms)), "")
        << "a connection made after SIGTERM was served";
  }

  RawConnection::End end;
  std::string replies = slow.ReadUntilClosed(15s, &end);
  EXPECT_EQ(end, RawConnection::End::kClosed);
  EXPECT_EQ(CountReplies(replies), static_cast<size_t>(kCommands));
  EXPECT_TRUE(replies == expected)
      << "received " << replies.size() << " of " << expected.size() << " bytes";
  auto status = server_->WaitForExit(5s);
  EXPECT_TRUE(ExitedWithCode(status, 0)) << DescribeWaitStatus(status);
}

// Idle connections must not hold shutdown up.
void ExpectCleanExitOnSignal(ServerProcess* server, int signal_number) {
  RawConnection idle(server->port());
  RawConnection used(server->port());
  ASSERT_TRUE(idle.connected());
  ASSERT_TRUE(used.connected());
  ASSERT_EQ(Printable(used.Exchange("PING\r\n", 1)), "+PONG\\r\\n");

  auto start = Clock::now();
  server->Signal(signal_number);
  auto status = server->WaitForExit(5s);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  EXPECT_TRUE(ExitedWithCode(status, 0)) << DescribeWaitStatus(status);
  EXPECT_LT(took.count(), 3000);
  RawConnection::End end;
  EXPECT_EQ(idle.ReadUntilClosed(1s, &end), "");
  EXPECT_NE(end, RawConnection::End::kTimeout);
}

TEST_F(ShutdownTest, SigtermWithIdleClientsExitsZeroPromptly) {
  ExpectCleanExitOnSignal(server_.get(), SIGTERM);
}

TEST_F(ShutdownTest, SigintWithIdleClientsExitsZeroPromptly) {
  ExpectCleanExitOnSignal(server_.get(), SIGINT);
}

}  // namespace
}  // namespace deferq::testing
