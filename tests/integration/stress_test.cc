// Stress of the thread boundary (issue 7 item 1): eight connections loop CLIENT LIST, CLIENT KILL
// of throwaway connections, INFO, PING and jobs (PUBLISH, and half the time CONSUME and ACK) on
// every loop thread at once. Before the mailbox, two loops listing clients at the same time
// deadlocked within ~130 calls and SIGTERM could not stop the process. The consumed jobs go to 700
// queues (more than one 512-name chunk of the stats snapshot's FiguresTable), so queues finish
// and are forgotten (retain_seconds = 1), and the others' figures change, every poll round while
// INFO's `# Queues` section reads older snapshots on the other threads. Asserts that every call is
// answered within a bound, PING works afterwards and SIGTERM stops the server.
//
// DEFERQ_STRESS_SECONDS sets how long each run lasts (default 5; the sanitizer job of
// scripts/test runs 40 through the "stress" meson test).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "integration_test.h"

namespace deferq::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Every call must be answered within this (hiredis's read timeout enforces it; a slower answer is
// a failure). Generous for the sanitizer builds on a loaded two-core machine.
constexpr auto kCallBound = 10s;
// The queues whose jobs are consumed at once (so they finish and are forgotten).
constexpr int kStressQueues = 700;

std::chrono::seconds StressDuration() {
  const char* env = std::getenv("DEFERQ_STRESS_SECONDS");
  const int seconds = env != nullptr ? std::atoi(env) : 0;
  return std::chrono::seconds(seconds > 0 ? seconds : 5);
}

class ClientsStressTest : public ::testing::TestWithParam<int> {};

// One looping client and what it saw.
bool IsString(const redisReply* r) { return r->type == REDIS_REPLY_STRING; }

struct StressWorker {
  long calls = 0;
  long kills = 0;
  long jobs = 0;
  std::chrono::milliseconds slowest{0};
  std::vector<std::string> failures;

  void Fail(std::string what) {
    if (failures.size() < 5) failures.push_back(std::move(what));
  }

  // Runs one call, timing it; false (with a failure recorded) when it got no acceptable reply.
  template <typename Check>
  bool Call(redisContext* client, const std::vector<std::string>& args, Check check) {
    const auto start = Clock::now();
    ReplyPtr reply = Command(client, args);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
    slowest = std::max(slowest, took);
    ++calls;
    if (reply == nullptr) {
      Fail(args[0] + " " + (args.size() > 1 ? args[1] : "") + ": no reply within " +
           std::to_string(kCallBound.count()) + " s");
      return false;
    }
    if (!check(reply.get())) {
      Fail(args[0] + " " + (args.size() > 1 ? args[1] : "") + ": " + Describe(reply.get()));
      return false;
    }
    return true;
  }

  void Run(uint16_t port, int worker, Clock::time_point until) {
    RedisContextPtr client = ConnectHiredis(port, kCallBound);
    if (!client) return Fail("cannot connect");
    for (long i = 0; Clock::now() < until; ++i) {
      bool ok = true;
      switch (i % 5) {
        case 0:
          ok = Call(client.get(), {"CLIENT", "LIST"}, IsString);
          break;
        case 1:
          ok = Call(client.get(), {"INFO"}, [](const redisReply* r) {
            return r->type == REDIS_REPLY_STRING &&
                   std::string_view(r->str, r->len).find("connected_clients:") !=
                       std::string_view::npos;
          });
          break;
        case 2:
          ok =
              Call(client.get(), {"PING"}, [](const redisReply* r) { return IsStatus(r, "PONG"); });
          break;
        case 3:
          ok = KillThrowaway(client.get(), port, i % 8 == 3);
          break;
        case 4:
          // Half the jobs are consumed and acknowledged at once (their queues empty and finish),
          // the others stay ready in 50 other queues (whose figures keep changing).
          if (i % 2 == 0) {
            ok = Job(client.get(), "stress_" + std::to_string((worker * 89 + i) % kStressQueues),
                     true);
          } else {
            ok = Job(client.get(), "stress_kept_" + std::to_string(i % 50), false);
          }
          break;
      }
      if (!ok) return;  // the connection may be out of step now
    }
  }

  // Publishes a job to `queue`; with `finish`, consumes one job of it and acknowledges it, so the
  // queue empties now and then.
  bool Job(redisContext* client, const std::string& queue, bool finish) {
    if (!Call(client, {"PUBLISH", queue, "payload"}, IsString)) {
      return false;
    }
    ++jobs;
    if (!finish) return true;
    std::string id;
    if (!Call(client, {"CONSUME", queue}, [&id](const redisReply* r) {
          if (r->type != REDIS_REPLY_ARRAY || r->elements < 2) return false;
          if (r->element[1]->type != REDIS_REPLY_STRING) return false;
          id = r->element[1]->str;
          return true;
        })) {
      return false;
    }
    return Call(client, {"ACK", queue, id}, [](const redisReply* r) {
      return r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    });
  }

  // Opens a connection (on whichever loop the kernel picks) and kills it from `client`, by id or
  // by address.
  bool KillThrowaway(redisContext* client, uint16_t port, bool by_addr) {
    RedisContextPtr victim = ConnectHiredis(port, kCallBound);
    if (!victim) {
      Fail("cannot connect a throwaway");
      return false;
    }
    ReplyPtr id = Command(victim.get(), {"CLIENT", "ID"});
    if (!id || id->type != REDIS_REPLY_INTEGER) {
      Fail("throwaway CLIENT ID: " + Describe(id.get()));
      return false;
    }
    bool ok;
    if (by_addr) {
      // The throwaway's address as the server sees it.
      ReplyPtr info = Command(victim.get(), {"CLIENT", "INFO"});
      std::string line = info && info->type == REDIS_REPLY_STRING ? info->str : "";
      const size_t at = line.find(" addr=");
      const std::string addr =
          at == std::string::npos ? "?" : line.substr(at + 6, line.find(' ', at + 6) - at - 6);
      ok = Call(client, {"CLIENT", "KILL", addr},
                [](const redisReply* r) { return IsStatus(r, "OK"); });
    } else {
      ok = Call(
          client, {"CLIENT", "KILL", "ID", std::to_string(id->integer)},
          [](const redisReply* r) { return r->type == REDIS_REPLY_INTEGER && r->integer == 1; });
    }
    if (!ok) return false;
    ++kills;
    if (Command(victim.get(), {"PING"}) != nullptr) {
      Fail("a killed throwaway still answered PING");
      return false;
    }
    return true;
  }
};

TEST_P(ClientsStressTest, ConcurrentClientListKillInfoPingJobsNeverStall) {
  std::unique_ptr<ServerProcess> redis = ServerProcess::StartRedis();
  ASSERT_NE(redis, nullptr);
  DeferqOptions options =
      WithConfig("[server]\nretain_seconds = 1\n" + DefaultPoolToml(redis->port()));
  options.threads = GetParam();
  std::unique_ptr<ServerProcess> server = ServerProcess::StartDeferq(options);
  ASSERT_NE(server, nullptr);
  constexpr int kWorkers = 8;
  const auto duration = StressDuration();
  const auto until = Clock::now() + duration;
  std::vector<StressWorker> workers(kWorkers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWorkers; ++i) {
    threads.emplace_back([&, i] { workers[i].Run(server->port(), i, until); });
  }
  for (std::thread& t : threads) t.join();

  long calls = 0, kills = 0, jobs = 0;
  std::chrono::milliseconds slowest{0};
  for (const StressWorker& w : workers) {
    calls += w.calls;
    kills += w.kills;
    jobs += w.jobs;
    slowest = std::max(slowest, w.slowest);
    for (const std::string& f : w.failures) ADD_FAILURE() << f;
  }
  std::printf("%d threads, %lld s: %ld calls, %ld kills, %ld jobs, slowest call %lld ms\n",
              GetParam(), static_cast<long long>(duration.count()), calls, kills, jobs,
              static_cast<long long>(slowest.count()));
  EXPECT_GT(kills, 0);
  EXPECT_GT(jobs, 0);
  EXPECT_LT(slowest, std::chrono::milliseconds(kCallBound));

  RedisContextPtr after = ConnectHiredis(server->port(), kCallBound);
  ASSERT_NE(after, nullptr);
  EXPECT_TRUE(IsStatus(Command(after.get(), {"PING"}).get(), "PONG"));
  // The INFO calls read snapshots holding these queues: the poller (every 2 s) sees the jobs left
  // ready within one round.
  bool listed = false;
  for (auto deadline = Clock::now() + 6s; !listed && Clock::now() < deadline;
       std::this_thread::sleep_for(100ms)) {
    ReplyPtr info = Command(after.get(), {"INFO", "queues"});
    listed = info && info->type == REDIS_REPLY_STRING &&
             std::string_view(info->str, info->len).find("queue_default/stress_kept_") !=
                 std::string_view::npos;
  }
  EXPECT_TRUE(listed) << "INFO queues never listed a stress_kept_ queue";
  after.reset();
  server->Signal(SIGTERM);
  auto status = server->WaitForExit(15s);
  EXPECT_TRUE(ExitedWithCode(status, 0)) << DescribeWaitStatus(status);
}

INSTANTIATE_TEST_SUITE_P(Threads, ClientsStressTest, ::testing::Values(2, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "Threads";
                         });

}  // namespace
}  // namespace deferq::testing
