// Requesters blocked in CALL over several loop threads and two instances (issue 26): the news of
// a finished job is heard on one thread of each instance and routed to the thread that parks its
// requester (queue/delivery/calls.h). Requesters CALL through either instance, workers answer
// through either one with ACK ... RESULT; some requesters drop their connection while waiting.
// Every call that stays gets its own result, and the processes stay up. Part of the integration
// suite, so the sanitizer jobs (TSan included) run it.
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "integration_test.h"

namespace deferq::testing {
namespace {

constexpr int kRequesters = 8;
constexpr int kCallsPerRequester = 40;
constexpr int kWorkers = 2;

using CallsTest = TwoInstancesTest;

TEST_F(CallsTest, CallsOverThreadsAndInstancesGetTheirOwnResults) {
  const std::string q = "calls-" + std::to_string(a_->port());
  const uint16_t ports[] = {a_->port(), b_->port()};
  std::mutex mu;
  std::vector<std::string> failures;
  auto fail = [&](std::string what) {
    std::lock_guard<std::mutex> lock(mu);
    if (failures.size() < 5) failures.push_back(std::move(what));
  };
  std::atomic<int> requesters_left{kRequesters};
  std::atomic<int> answered{0}, dropped{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      RedisContextPtr conn = ConnectHiredis(ports[w % 2], 10s);
      if (conn == nullptr) return fail("cannot connect a worker");
      const auto until = std::chrono::steady_clock::now() + 60s;
      while (std::chrono::steady_clock::now() < until) {
        ReplyPtr r = Command(conn.get(), {"CONSUME", q, "TIMEOUT", "0.5", "COUNT", "4"});
        if (r == nullptr) return fail("CONSUME: no reply");
        if (r->type == REDIS_REPLY_NIL) {
          if (requesters_left.load() == 0) return;
          continue;
        }
        if (r->type != REDIS_REPLY_ARRAY) return fail("CONSUME: " + Describe(r.get()));
        for (size_t i = 0; i < r->elements; ++i) {
          const redisReply* job = r->element[i];
          const std::string id(job->element[1]->str, job->element[1]->len);
          const std::string payload(job->element[2]->str, job->element[2]->len);
          ReplyPtr ack = Command(conn.get(), {"ACK", q, id, "RESULT", "re:" + payload});
          if (ack == nullptr || ack->type != REDIS_REPLY_INTEGER) {
            return fail("ACK: " + Describe(ack.get()));
          }
        }
      }
      fail("a worker still found calls after 60 s");
    });
  }
  for (int c = 0; c < kRequesters; ++c) {
    threads.emplace_back([&, c] {
      RedisContextPtr conn;
      for (int i = 0; i < kCallsPerRequester; ++i) {
        if (conn == nullptr) conn = ConnectHiredis(ports[(c + i) % 2], 10s);
        if (conn == nullptr) {
          fail("cannot connect a requester");
          break;
        }
        const std::string payload = std::to_string(c) + "-" + std::to_string(i);
        // Now and then a requester leaves while it waits: its call is forgotten.
        if (c % 4 == 3 && i % 10 == 5) {
          AppendCommand(conn.get(), {"CALL", q, payload, "RETAIN", "1"});
          Flush(conn.get());
          std::this_thread::sleep_for(std::chrono::milliseconds(i % 7));
          conn.reset();
          ++dropped;
          continue;
        }
        ReplyPtr r = Command(conn.get(), {"CALL", q, payload, "TIMEOUT", "20"});
        if (r == nullptr || r->type != REDIS_REPLY_STRING ||
            std::string(r->str, r->len) != "re:" + payload) {
          fail("CALL " + payload + ": " + Describe(r.get()));
          break;
        }
        ++answered;
      }
      --requesters_left;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(answered.load() + dropped.load(), kRequesters * kCallsPerRequester);
  std::printf("%d calls answered, %d requesters left while waiting\n", answered.load(),
              dropped.load());
  for (auto* d : {&a_, &b_}) {
    RedisContextPtr check = ConnectHiredis((*d)->port(), 10s);
    ASSERT_NE(check, nullptr);
    EXPECT_TRUE(IsStatus(Command(check.get(), {"PING"}).get(), "PONG"));
    ReplyPtr info = Command(check.get(), {"INFO", "clients"});
    ASSERT_TRUE(info && info->type == REDIS_REPLY_STRING);
    EXPECT_NE(std::string(info->str, info->len).find("blocked_clients:0"), std::string::npos)
        << "a call is still parked";
  }
}

}  // namespace
}  // namespace deferq::testing
