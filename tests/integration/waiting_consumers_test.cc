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

using WaitingConsumersTest = TwoInstancesTest;

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

// Served where pumped (queue/delivery/waiters.h WaiterOrder::Hold): a job falling due goes,
// unannounced, to a consumer blocked in the instance that pumps its queue; while that consumer is
// busy, the pump announces the next job and a consumer of the other instance takes it.
TEST_F(WaitingConsumersTest, DueJobsGoToThePumpingInstanceFirstThenToTheOthers) {
  // The pump owner (INFO pump_owner:1) pumps what it publishes.
  uint16_t owner = 0, other = 0;
  for (int i = 0; i < 100 && owner == 0; ++i) {
    for (auto* d : {&a_, &b_}) {
      RedisContextPtr c = ConnectHiredis((*d)->port(), 10s);
      ASSERT_NE(c, nullptr);
      ReplyPtr info = Command(c.get(), {"INFO"});
      ASSERT_TRUE(info && info->type == REDIS_REPLY_STRING) << Describe(info.get());
      if (std::string(info->str, info->len).find("pump_owner:1") != std::string::npos) {
        owner = (*d)->port();
        other = (d == &a_ ? b_ : a_)->port();
      }
    }
    if (owner == 0) std::this_thread::sleep_for(100ms);
  }
  ASSERT_NE(owner, 0) << "no instance became the pump owner";
  const std::string q = "held-" + std::to_string(a_->port());
  RedisContextPtr here = ConnectHiredis(owner, 10s), there = ConnectHiredis(other, 10s);
  RedisContextPtr producer = ConnectHiredis(owner, 10s);
  ASSERT_TRUE(here && there && producer);
  const std::vector<std::string> consume = {"CONSUME", q, "TIMEOUT", "8"};
  AppendCommand(there.get(), consume);
  ASSERT_TRUE(Flush(there.get()));
  AppendCommand(here.get(), consume);
  ASSERT_TRUE(Flush(here.get()));
  std::this_thread::sleep_for(300ms);  // both blocked, the markers set

  ReplyPtr first = Command(producer.get(), {"PUBLISH", q, "one", "PDELAY", "300"});
  ASSERT_TRUE(first && first->type == REDIS_REPLY_STRING) << Describe(first.get());
  ReplyPtr got = GetReply(here.get());
  ASSERT_TRUE(got && got->type == REDIS_REPLY_ARRAY && got->elements >= 3) << Describe(got.get());
  EXPECT_EQ(std::string(got->element[1]->str, got->element[1]->len),
            std::string(first->str, first->len));
  // The owner's consumer is busy with it: the next job is announced, and the consumer blocked in
  // the other instance takes it (not the first one, which it never saw).
  const auto sent = std::chrono::steady_clock::now();
  ReplyPtr second = Command(producer.get(), {"PUBLISH", q, "two", "PDELAY", "300"});
  ASSERT_TRUE(second && second->type == REDIS_REPLY_STRING) << Describe(second.get());
  ReplyPtr took = GetReply(there.get());
  ASSERT_TRUE(took && took->type == REDIS_REPLY_ARRAY && took->elements >= 3)
      << Describe(took.get());
  EXPECT_EQ(std::string(took->element[1]->str, took->element[1]->len),
            std::string(second->str, second->len));
  EXPECT_LT(std::chrono::steady_clock::now() - sent, 3s);
  for (auto* job : {first.get(), second.get()}) {
    ReplyPtr ack = Command(producer.get(), {"ACK", q, std::string(job->str, job->len)});
    EXPECT_TRUE(ack && ack->type == REDIS_REPLY_INTEGER && ack->integer == 1)
        << Describe(ack.get());
  }
}

}  // namespace
}  // namespace deferq::testing
