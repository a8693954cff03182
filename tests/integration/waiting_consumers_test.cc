// Consumers blocked on many queues at once, over several loop threads and two instances (issue
// 21: queue sets shared by the threads, announcements, the "empty" news, wake-ups that arrive
// while a consume is in flight). Consumers loop `CONSUME q0 .. q7 TIMEOUT 1 COUNT 3` and ACK what
// they got; producers publish to random queues, now or a few ms ahead, through either instance;
// some consumers drop their connection while blocked. Every job is delivered, none twice after
// its ACK, and the processes stay up. Part of the integration suite, so the sanitizer jobs (TSan
// included) run it.
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration_test.h"

namespace deferq::testing {
namespace {

constexpr int kQueues = 8;
constexpr int kProducers = 2;
constexpr int kJobsPerProducer = 600;
constexpr int kConsumers = 8;

class WaitingConsumersTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { redis_ = ServerProcess::StartRedis(); }
  static void TearDownTestSuite() { redis_.reset(); }

  void SetUp() override {
    ASSERT_NE(redis_, nullptr) << "redis-server did not start";
    for (auto* d : {&a_, &b_}) {
      DeferqOptions options = WithConfig(
          "[pools.default]\naddr = \"redis://127.0.0.1:" + std::to_string(redis_->port()) + "\"\n");
      options.threads = 4;  // connections spread over several loops (SO_REUSEPORT)
      *d = ServerProcess::StartDeferq(options);
      ASSERT_NE(*d, nullptr);
    }
  }

  static inline std::unique_ptr<ServerProcess> redis_;
  std::unique_ptr<ServerProcess> a_, b_;
};

TEST_F(WaitingConsumersTest, ConsumersOfManyQueuesOverThreadsAndInstancesGetEveryJob) {
  const std::string prefix = "wait-" + std::to_string(a_->port()) + "-";
  std::vector<std::string> consume = {"CONSUME"};
  for (int q = 0; q < kQueues; ++q) consume.push_back(prefix + std::to_string(q));
  for (const char* a : {"TIMEOUT", "1", "COUNT", "3"}) consume.push_back(a);
  const uint16_t ports[] = {a_->port(), b_->port()};

  std::mutex mu;
  std::set<std::string> published, acked;
  std::vector<std::string> failures;
  auto fail = [&](std::string what) {
    std::lock_guard<std::mutex> lock(mu);
    if (failures.size() < 5) failures.push_back(std::move(what));
  };
  std::atomic<int> producers_left{kProducers};
  std::atomic<int> drops{0};

  std::vector<std::thread> threads;
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&, c] {
      std::mt19937 rnd(c);
      const auto until = std::chrono::steady_clock::now() + 60s;
      RedisContextPtr conn;
      int idle_rounds = 0;
      while (std::chrono::steady_clock::now() < until) {
        if (conn == nullptr) conn = ConnectHiredis(ports[c % 2], 10s);
        if (conn == nullptr) return fail("cannot connect a consumer");
        // Now and then a consumer goes away while blocked (the wake-up then finds nobody).
        if (c % 4 == 3 && rnd() % 8 == 0 && producers_left.load() > 0) {
          AppendCommand(conn.get(), consume);
          Flush(conn.get());
          std::this_thread::sleep_for(std::chrono::milliseconds(rnd() % 5));
          conn.reset();
          ++drops;
          continue;
        }
        ReplyPtr r = Command(conn.get(), consume);
        if (r == nullptr) return fail("CONSUME: no reply");
        if (r->type == REDIS_REPLY_NIL) {
          // Timed out with nothing: done once the producers are and two rounds found nothing.
          if (producers_left.load() == 0 && ++idle_rounds >= 2) return;
          continue;
        }
        idle_rounds = 0;
        if (r->type != REDIS_REPLY_ARRAY) return fail("CONSUME: " + Describe(r.get()));
        // COUNT 3: an array of [queue, id, payload, ...] entries.
        for (size_t i = 0; i < r->elements; ++i) {
          const redisReply* job = r->element[i];
          if (job->type != REDIS_REPLY_ARRAY || job->elements < 3) {
            return fail("job entry: " + Describe(job));
          }
          const std::string queue(job->element[0]->str, job->element[0]->len);
          const std::string id(job->element[1]->str, job->element[1]->len);
          ReplyPtr ack = Command(conn.get(), {"ACK", queue, id});
          if (ack == nullptr || ack->type != REDIS_REPLY_INTEGER) {
            return fail("ACK: " + Describe(ack.get()));
          }
          std::lock_guard<std::mutex> lock(mu);
          if (ack->integer == 1 && !acked.insert(id).second) failures.push_back("acked twice");
        }
      }
      fail("a consumer still found jobs after 60 s");
    });
  }
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      std::mt19937 rnd(100 + p);
      RedisContextPtr conn = ConnectHiredis(ports[p % 2], 10s);
      if (conn == nullptr) {
        --producers_left;
        return fail("cannot connect a producer");
      }
      for (int i = 0; i < kJobsPerProducer; ++i) {
        const std::string q = prefix + std::to_string(rnd() % kQueues);
        std::vector<std::string> args = {"PUBLISH", q, "job"};
        if (rnd() % 3 == 0) {
          args.push_back("PDELAY");
          args.push_back(std::to_string(1 + rnd() % 30));
        }
        ReplyPtr r = Command(conn.get(), args);
        if (r == nullptr || r->type != REDIS_REPLY_STRING) {
          fail("PUBLISH: " + Describe(r.get()));
          break;
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          published.insert(std::string(r->str, r->len));
        }
        if (i % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(rnd() % 20));
      }
      --producers_left;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(published.size(), static_cast<size_t>(kProducers * kJobsPerProducer));
  // A job leased to a consumer that dropped its connection comes back after its ttr (30 s by
  // default), which the loop above may not wait for: what is not acked must be such a lease.
  std::set<std::string> missing;
  for (const std::string& id : published) {
    if (acked.count(id) == 0) missing.insert(id);
  }
  RedisContextPtr check = ConnectHiredis(a_->port(), 10s);
  ASSERT_NE(check, nullptr);
  long long leased = 0;
  for (int q = 0; q < kQueues; ++q) {
    ReplyPtr st = Command(check.get(), {"QSTAT", prefix + std::to_string(q)});
    ASSERT_TRUE(st && st->type == REDIS_REPLY_ARRAY) << Describe(st.get());
    for (size_t i = 0; i + 1 < st->elements; i += 2) {
      const std::string field(st->element[i]->str, st->element[i]->len);
      if (field == "ready" || field == "delayed") {
        EXPECT_EQ(st->element[i + 1]->integer, 0) << field << " left in queue " << q;
      }
      if (field == "leased") leased += st->element[i + 1]->integer;
    }
  }
  EXPECT_EQ(static_cast<long long>(missing.size()), leased)
      << "jobs neither acked nor leased to a dropped consumer";
  std::printf("%zu jobs, %zu acked, %d consumers dropped while blocked, %lld leases to them\n",
              published.size(), acked.size(), drops.load(), leased);
  for (auto* d : {&a_, &b_}) {
    RedisContextPtr ping = ConnectHiredis((*d)->port(), 10s);
    ASSERT_NE(ping, nullptr);
    EXPECT_TRUE(IsStatus(Command(ping.get(), {"PING"}).get(), "PONG"));
  }
}

}  // namespace
}  // namespace deferq::testing
