// Pipelines of CONSUMEs and ACKs from many connections at once, over several loop threads
// (persist/call_batch.h: a pipeline of one-job CONSUMEs leaves as one consume of COUNT n, a
// pipeline of one-id ACKs as one acks.lua call). Every job is handed out exactly once and every
// ACK of a held lease answers 1. Part of the integration suite, so the sanitizer jobs run it.
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "integration_test.h"

namespace deferq::testing {
namespace {

constexpr int kJobs = 4000;
constexpr int kClients = 8;
constexpr int kDepth = 32;

class PipelinedJobsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { redis_ = ServerProcess::StartRedis(); }
  static void TearDownTestSuite() { redis_.reset(); }

  void SetUp() override {
    ASSERT_NE(redis_, nullptr) << "redis-server did not start";
    DeferqOptions options = WithConfig(DefaultPoolToml(redis_->port()));
    options.threads = 4;  // connections spread over several loops (SO_REUSEPORT)
    deferq_ = ServerProcess::StartDeferq(options);
    ASSERT_NE(deferq_, nullptr);
  }

  static inline std::unique_ptr<ServerProcess> redis_;
  std::unique_ptr<ServerProcess> deferq_;
};

// The QSTAT reply as field -> value.
std::map<std::string, long long> Qstat(redisContext* c, const std::string& q) {
  std::map<std::string, long long> out;
  ReplyPtr r = Command(c, {"QSTAT", q});
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return out;
  for (size_t i = 0; i + 1 < r->elements; i += 2) {
    out[std::string(r->element[i]->str, r->element[i]->len)] = r->element[i + 1]->integer;
  }
  return out;
}

TEST_F(PipelinedJobsTest, ManyConnectionsPipeliningConsumesAndAcksGetEachJobOnce) {
  const std::string q = "pipelined-" + std::to_string(deferq_->port());
  RedisContextPtr producer = ConnectHiredis(deferq_->port());
  ASSERT_NE(producer, nullptr);
  for (int i = 0; i < kJobs; ++i) AppendCommand(producer.get(), {"PUBLISH", q, std::to_string(i)});
  ASSERT_TRUE(Flush(producer.get()));
  for (int i = 0; i < kJobs; ++i) {
    ReplyPtr r = GetReply(producer.get());
    ASSERT_TRUE(r && r->type == REDIS_REPLY_STRING) << Describe(r.get());
  }

  std::mutex mu;
  std::vector<std::string> payloads;  // every job handed out, by all clients
  std::vector<std::string> failures;
  auto client = [&] {
    RedisContextPtr c = ConnectHiredis(deferq_->port());
    if (c == nullptr) {
      std::lock_guard lock(mu);
      failures.push_back("connect failed");
      return;
    }
    // Bounded: kJobs / kDepth rounds would do for one client alone.
    for (int round = 0; round < kJobs / kDepth + 10; ++round) {
      for (int i = 0; i < kDepth; ++i) AppendCommand(c.get(), {"CONSUME", q, "TTR", "120"});
      if (!Flush(c.get())) break;
      std::vector<std::string> ids, got;
      for (int i = 0; i < kDepth; ++i) {
        ReplyPtr r = GetReply(c.get());
        if (r && r->type == REDIS_REPLY_NIL) continue;
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 7) {
          std::lock_guard lock(mu);
          failures.push_back("CONSUME: " + Describe(r.get()));
          return;
        }
        ids.emplace_back(r->element[1]->str, r->element[1]->len);
        got.emplace_back(r->element[2]->str, r->element[2]->len);
      }
      if (ids.empty()) break;  // the queue is empty: every null above was a true one
      for (const std::string& id : ids) AppendCommand(c.get(), {"ACK", q, id});
      if (!Flush(c.get())) break;
      for (const std::string& id : ids) {
        ReplyPtr r = GetReply(c.get());
        if (!r || r->type != REDIS_REPLY_INTEGER || r->integer != 1) {
          std::lock_guard lock(mu);
          failures.push_back("ACK " + id + ": " + Describe(r.get()));
        }
      }
      std::lock_guard lock(mu);
      payloads.insert(payloads.end(), got.begin(), got.end());
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) threads.emplace_back(client);
  for (std::thread& t : threads) t.join();

  EXPECT_TRUE(failures.empty()) << failures.size() << " failures, first: " << failures.front();
  EXPECT_EQ(payloads.size(), static_cast<size_t>(kJobs)) << "each job handed out once";
  std::set<std::string> distinct(payloads.begin(), payloads.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kJobs)) << "no job handed out twice";
  auto st = Qstat(producer.get(), q);
  EXPECT_EQ(st["ready"], 0);
  EXPECT_EQ(st["leased"], 0);
  EXPECT_EQ(st["consumed_total"], kJobs);
  EXPECT_EQ(st["acked_total"], kJobs);
}

// Delayed jobs falling due on queues some consumers block on (their first waiter announces
// itself on dq:ready: thread 0 hears it and routes a pump to the queue's loop thread) and others
// poll without blocking (each CONSUME moves what is due itself: lazy moving), all over four loop
// threads at once. Every job arrives once; no timing is asserted (the sanitizer jobs run it).
TEST_F(PipelinedJobsTest, BlockedAndPollingConsumersOverFourLoopsGetEveryDelayedJobOnce) {
  constexpr int kQueues = 8;  // even: blocked, odd: polled
  constexpr int kPerQueue = 20;
  const std::string base = "lazy-" + std::to_string(deferq_->port()) + "-";
  RedisContextPtr producer = ConnectHiredis(deferq_->port());
  ASSERT_NE(producer, nullptr);
  for (int q = 0; q < kQueues; ++q) {
    for (int i = 0; i < kPerQueue; ++i) {
      AppendCommand(producer.get(), {"PUBLISH", base + std::to_string(q), std::to_string(i),
                                     "PDELAY", std::to_string(200 + 50 * i)});
    }
  }
  ASSERT_TRUE(Flush(producer.get()));
  for (int i = 0; i < kQueues * kPerQueue; ++i) {
    ReplyPtr r = GetReply(producer.get());
    ASSERT_TRUE(r && r->type == REDIS_REPLY_STRING) << Describe(r.get());
  }

  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::multiset<std::string>> got(kQueues);
  auto consumer = [&](int q) {
    const std::string name = base + std::to_string(q);
    RedisContextPtr c = ConnectHiredis(deferq_->port());
    if (c == nullptr) {
      std::lock_guard lock(mu);
      failures.push_back("connect failed");
      return;
    }
    const bool blocking = q % 2 == 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::multiset<std::string> mine;
    while (static_cast<int>(mine.size()) < kPerQueue &&
           std::chrono::steady_clock::now() < deadline) {
      ReplyPtr r = blocking ? Command(c.get(), {"CONSUME", name, "TIMEOUT", "2"})
                            : Command(c.get(), {"CONSUME", name});
      if (r && r->type == REDIS_REPLY_NIL) {
        if (!blocking) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 7) {
        std::lock_guard lock(mu);
        failures.push_back("CONSUME " + name + ": " + Describe(r.get()));
        return;
      }
      mine.emplace(r->element[2]->str, r->element[2]->len);
      ReplyPtr ack =
          Command(c.get(), {"ACK", name, std::string(r->element[1]->str, r->element[1]->len)});
      if (!ack || ack->type != REDIS_REPLY_INTEGER || ack->integer != 1) {
        std::lock_guard lock(mu);
        failures.push_back("ACK " + name + ": " + Describe(ack.get()));
      }
    }
    std::lock_guard lock(mu);
    got[q] = std::move(mine);
  };
  std::vector<std::thread> threads;
  for (int q = 0; q < kQueues; ++q) threads.emplace_back(consumer, q);
  for (std::thread& t : threads) t.join();

  EXPECT_TRUE(failures.empty()) << failures.size() << " failures, first: " << failures.front();
  for (int q = 0; q < kQueues; ++q) {
    std::multiset<std::string> want;
    for (int i = 0; i < kPerQueue; ++i) want.insert(std::to_string(i));
    EXPECT_EQ(got[q], want) << "queue " << q << ": each job once";
    auto st = Qstat(producer.get(), base + std::to_string(q));
    EXPECT_EQ(st["ready"] + st["delayed"] + st["leased"], 0) << "queue " << q;
    EXPECT_EQ(st["acked_total"], kPerQueue) << "queue " << q;
  }
}

}  // namespace
}  // namespace deferq::testing
