// CallBatcher (persist/call_batch.h): which calls go together, in what order batches leave, and
// how a batch's reply reaches each call.
#include "persist/call_batch.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <string>
#include <vector>

#include "persist/cluster_slots.h"
#include "persist/parsed_reply.h"

namespace deferq::persist {
namespace {

struct Sent {
  Script script;
  std::string key;                // the first queue key
  std::vector<std::string> keys;  // all of them
  std::vector<std::string> args;
  uint64_t affinity;
  UpstreamCallback cb;
};

struct Fixture {
  explicit Fixture(bool cluster = false, size_t connections = 1)
      : batcher(
            [this](Script s, std::span<const std::string_view> keys,
                   std::span<const std::string_view> args, uint64_t affinity, UpstreamCallback cb) {
              sent.push_back(
                  {s, std::string(keys[0]), std::vector<std::string>(keys.begin(), keys.end()),
                   std::vector<std::string>(args.begin(), args.end()), affinity, std::move(cb)});
            },
            LibraryBatchRule(), &stats, cluster, connections) {}
  std::vector<Sent> sent;
  PoolStats stats;
  CallBatcher batcher;
  std::vector<std::string> replies;  // what each call got, in the order the callbacks ran

  void Add(Script s, std::string key, std::vector<std::string_view> args, uint64_t affinity,
           std::string name) {
    batcher.Add(s, key, args, affinity, [this, name](const UpstreamResult& r) {
      std::string got = name + ":";
      if (r.reply == nullptr) {
        got += std::string(r.error);
      } else if (r.reply->type == REDIS_REPLY_INTEGER) {
        got += std::to_string(r.reply->integer);
      } else if (r.reply->type == REDIS_REPLY_ERROR) {
        got += "-" + std::string(r.reply->str, r.reply->len);
      } else {
        got += "?";
      }
      replies.push_back(got);
    });
  }
};

const std::string kQ = "dq:{ns/q}:";

TEST(CallBatcher, OneCallAloneIsThePlainCall) {
  Fixture f;
  f.Add(Script::kAck, kQ, {"1", "K", ""}, 7, "a");
  EXPECT_TRUE(f.sent.empty());  // held until the loop flushes
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].script, Script::kAck);
  EXPECT_EQ(f.sent[0].args, (std::vector<std::string>{"1", "K", ""}));
  EXPECT_EQ(f.sent[0].affinity, 7u);
}

TEST(CallBatcher, ConsecutiveCallsOnAQueueGoAsOneBatchAndEachGetsItsReply) {
  Fixture f;
  f.Add(Script::kAck, kQ, {"1", "A", ""}, 7, "a");
  f.Add(Script::kAck, kQ, {"1", "B", ""}, 7, "b");
  f.Add(Script::kAck, kQ, {"2", "C", "5"}, 7, "c");  // another ms: not one acks call
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].script, Script::kBatchFree);  // acks and consumes run at maxmemory
  EXPECT_EQ(f.sent[0].key, kQ);
  // The script, one queue, then each call's queue number, argument count and arguments.
  EXPECT_EQ(f.sent[0].args, (std::vector<std::string>{"ack", "1", "1", "3", "1", "A", "", "1", "3",
                                                      "1", "B", "", "1", "3", "2", "C", "5"}));
  EXPECT_EQ(f.stats.requests.load(), 2u);  // the connection counts the third
  auto reply = Parse("*3\r\n:1\r\n-ERR deferq ack: bad arguments\r\n:0\r\n");
  f.sent[0].cb(UpstreamResult{reply.get(), {}});
  EXPECT_EQ(f.replies,
            (std::vector<std::string>{"a:1", "b:-ERR deferq ack: bad arguments", "c:0"}));
}

TEST(CallBatcher, OneIdAcksOfOneMsGoAsOneAcksCallAndEachGetsItsReply) {
  Fixture f;
  f.Add(Script::kAck, kQ, {"1", "A", ""}, 7, "a");
  f.Add(Script::kAck, kQ, {"1", "B", "9"}, 7, "b");
  f.Add(Script::kAck, kQ, {"1", "A", ""}, 7, "c");
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].script, Script::kAcks);
  EXPECT_EQ(f.sent[0].args, (std::vector<std::string>{"1", "A", "", "B", "9", "A", ""}));
  EXPECT_EQ(f.stats.requests.load(), 2u);
  auto reply = Parse("*3\r\n:1\r\n-ERR deferq ack: derivable_sec does not match K\r\n:0\r\n");
  f.sent[0].cb(UpstreamResult{reply.get(), {}});
  EXPECT_EQ(f.replies, (std::vector<std::string>{
                           "a:1", "b:-ERR deferq ack: derivable_sec does not match K", "c:0"}));
  // ACKs of two ms, or of several ids, stay a batch of ack calls.
  f.Add(Script::kAck, kQ, {"1", "A", ""}, 7, "d");
  f.Add(Script::kAck, kQ, {"2", "B", ""}, 7, "e");
  f.batcher.SendAll();
  f.Add(Script::kAck, kQ, {"1", "A", "", "B", ""}, 7, "g");
  f.Add(Script::kAck, kQ, {"1", "C", ""}, 7, "h");
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 3u);
  EXPECT_EQ(f.sent[1].script, Script::kBatchFree);
  EXPECT_EQ(f.sent[2].script, Script::kBatchFree);
}

TEST(CallBatcher, AFailedBatchFailsEveryCallAndCountsEach) {
  Fixture f;
  for (const char* name : {"a", "b", "c"}) f.Add(Script::kPublish, kQ, {"1"}, 7, name);
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 1u);
  // Publishes batch through the function without allow-oom: refused at maxmemory, as one is.
  EXPECT_EQ(f.sent[0].script, Script::kBatch);
  f.sent[0].cb(UpstreamResult{nullptr, "TIMEOUT pool 'p' did not answer"});
  EXPECT_EQ(f.replies.size(), 3u);
  EXPECT_EQ(f.replies[2], "c:TIMEOUT pool 'p' did not answer");
  EXPECT_EQ(f.stats.timeouts.load(), 2u);  // plus the connection's one
  f.Add(Script::kPublish, kQ, {"1"}, 7, "d");
  f.Add(Script::kPublish, kQ, {"1"}, 7, "e");
  f.batcher.SendAll();
  auto refused = Parse("-ERR deferq batch: bad argument counts\r\n");
  f.sent[1].cb(UpstreamResult{refused.get(), {}});
  EXPECT_EQ(f.replies[4], "e:-ERR deferq batch: bad argument counts");
  auto wrong = Parse("*1\r\n:1\r\n");  // not one reply per call
  f.Add(Script::kPublish, kQ, {"1"}, 7, "f");
  f.Add(Script::kPublish, kQ, {"1"}, 7, "g");
  f.batcher.SendAll();
  f.sent[2].cb(UpstreamResult{wrong.get(), {}});
  EXPECT_EQ(f.replies[6], "g:ERR unexpected reply from storage");
}

// What a consume call got: "ready_left" alone, or "ready_left K payload tries ttl attempt created".
std::string ConsumeReply(const UpstreamResult& r) {
  if (r.reply == nullptr) return std::string(r.error);
  if (r.reply->type == REDIS_REPLY_ERROR) return "-" + std::string(r.reply->str, r.reply->len);
  if (r.reply->type != REDIS_REPLY_ARRAY) return "?";
  std::string out;
  for (size_t i = 0; i < r.reply->elements; ++i) {
    const redisReply* e = r.reply->element[i];
    if (i > 0) out += ' ';
    out +=
        e->type == REDIS_REPLY_INTEGER ? std::to_string(e->integer) : std::string(e->str, e->len);
  }
  return out;
}

TEST(CallBatcher, APipelineOfOneJobConsumesGoesAsOneConsumeAndEachCallGetsItsJob) {
  Fixture f;
  for (int i = 0; i < 3; ++i) {
    const std::vector<std::string_view> args = {"1000", "30000", "1"};
    f.batcher.Add(Script::kConsume, kQ, args, 7,
                  [&f](const UpstreamResult& r) { f.replies.push_back(ConsumeReply(r)); });
  }
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].script, Script::kConsume);
  EXPECT_EQ(f.sent[0].args, (std::vector<std::string>{"1000", "30000", "3"}));
  EXPECT_EQ(f.stats.requests.load(), 2u);
  // Two jobs for three calls, 5 still ready (the pop bound was hit): the first two calls get a
  // job each, with the gauge after their lease; the third the gauge alone.
  auto reply = Parse(
      "*13\r\n:5\r\n$2\r\nK1\r\n$2\r\np1\r\n:0\r\n:-1\r\n:1\r\n:900\r\n"
      "$2\r\nK2\r\n$2\r\np2\r\n:2\r\n:60\r\n:3\r\n:901\r\n");
  f.sent[0].cb(UpstreamResult{reply.get(), {}});
  EXPECT_EQ(f.replies, (std::vector<std::string>{"6 K1 p1 0 -1 1 900", "5 K2 p2 2 60 3 901", "5"}));
  // A paused queue ({0}) and an error reach every call; so does a reply of another shape.
  for (const char* answer :
       {"*1\r\n:0\r\n", "-ERR deferq consume: bad arguments\r\n", "*2\r\n:0\r\n:1\r\n"}) {
    f.replies.clear();
    for (int i = 0; i < 2; ++i) {
      const std::vector<std::string_view> args = {"1000", "30000", "1"};
      f.batcher.Add(Script::kConsume, kQ, args, 7,
                    [&f](const UpstreamResult& r) { f.replies.push_back(ConsumeReply(r)); });
    }
    f.batcher.SendAll();
    auto parsed = Parse(answer);
    f.sent.back().cb(UpstreamResult{parsed.get(), {}});
    ASSERT_EQ(f.replies.size(), 2u) << answer;
    EXPECT_EQ(f.replies[0], f.replies[1]) << answer;
  }
  EXPECT_EQ(f.replies[0], "ERR unexpected reply from storage");
}

TEST(CallBatcher, ConsumesWithOtherArgumentsOrCountsStayABatch) {
  Fixture f;
  f.Add(Script::kConsume, kQ, {"1000", "30000", "1"}, 7, "a");
  f.Add(Script::kConsume, kQ, {"1001", "30000", "1"}, 7, "b");  // another ms
  f.batcher.SendAll();
  f.Add(Script::kConsume, kQ, {"1000", "30000", "2"}, 7, "c");
  f.Add(Script::kConsume, kQ, {"1000", "30000", "2"}, 7, "d");  // COUNT 2 each
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 2u);
  EXPECT_EQ(f.sent[0].script, Script::kBatchFree);  // acks and consumes run at maxmemory
  EXPECT_EQ(f.sent[1].script, Script::kBatchFree);
}

TEST(CallBatcher, AnotherScriptOrRequestSendsTheClientsBatchFirst) {
  Fixture f;
  f.Add(Script::kPublish, kQ, {"p1"}, 7, "a");
  f.Add(Script::kPublish, kQ, {"p2"}, 7, "b");
  f.Add(Script::kConsume, kQ, {"c"}, 7, "c");  // another script: the publishes go
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].args[0], "publish");
  f.Add(Script::kConsume, "dq:{ns/other}:", {"d"}, 7, "d");  // another queue: the same batch
  ASSERT_EQ(f.sent.size(), 1u);
  f.batcher.SendClient(7);  // a plain command of the client comes next
  ASSERT_EQ(f.sent.size(), 2u);
  EXPECT_EQ(f.sent[1].script, Script::kBatchFree);
  EXPECT_EQ(f.sent[1].keys, (std::vector<std::string>{kQ, "dq:{ns/other}:"}));
  EXPECT_EQ(f.sent[1].args,
            (std::vector<std::string>{"consume", "2", "1", "1", "c", "2", "1", "d"}));
}

TEST(CallBatcher, ClientsBatchApartOverTheirConnectionsAndAFullBatchLeaves) {
  Fixture f(/*cluster=*/false, /*connections=*/4);  // affinities 1, 2, 3: three connections
  f.Add(Script::kAck, kQ, {"1"}, 1, "a");
  f.Add(Script::kAck, kQ, {"1"}, 2, "b");
  f.Add(Script::kAck, kQ, {"1"}, 1, "c");
  EXPECT_TRUE(f.sent.empty());
  for (size_t i = 0; i < CallBatcher::kMaxCalls; ++i) f.Add(Script::kAck, kQ, {"1"}, 3, "x");
  EXPECT_TRUE(f.sent.empty());
  f.Add(Script::kAck, kQ, {"1"}, 3, "y");  // the 65th: the first 64 leave
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].affinity, 3u);
  EXPECT_EQ(f.sent[0].args.size(), 2 + 3 * CallBatcher::kMaxCalls);
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 4u);
  EXPECT_EQ(f.sent[1].affinity, 1u);
  EXPECT_EQ(f.sent[1].args, (std::vector<std::string>{"ack", "1", "1", "1", "1", "1", "1", "1"}));
  EXPECT_EQ(f.sent[2].affinity, 2u);
  EXPECT_EQ(f.sent[3].affinity, 3u);
}

TEST(CallBatcher, AClientsCallsOverManyQueuesGoAsOneBatchInOrder) {
  Fixture f;
  for (int i = 0; i < 7; ++i) {  // shards 0 1 2 3 0 1 2 of a sharded queue, in turn
    const int shard = i % 4;
    const std::string key =
        shard == 0 ? "dq:{ns/hot}:" : "dq:{ns/hot#" + std::to_string(shard) + "}:";
    f.Add(Script::kPublish, key, {"s" + std::to_string(i)}, 7, "s" + std::to_string(i));
  }
  f.Add(Script::kPublish, "dq:{ns/cold}:", {"c"}, 7, "other");
  EXPECT_TRUE(f.sent.empty());
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 1u);
  EXPECT_EQ(f.sent[0].script, Script::kBatch);
  EXPECT_EQ(f.sent[0].keys,
            (std::vector<std::string>{"dq:{ns/hot}:", "dq:{ns/hot#1}:", "dq:{ns/hot#2}:",
                                      "dq:{ns/hot#3}:", "dq:{ns/cold}:"}));
  EXPECT_EQ(f.sent[0].args,
            (std::vector<std::string>{"publish", "5",  "1", "1", "s0", "2", "1", "s1", "3",
                                      "1",       "s2", "4", "1", "s3", "1", "1", "s4", "2",
                                      "1",       "s5", "3", "1", "s6", "5", "1", "c"}));
  auto reply = Parse("*8\r\n:0\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n");
  f.sent[0].cb(UpstreamResult{reply.get(), {}});
  EXPECT_EQ(f.replies.back(), "other:7");
  EXPECT_EQ(f.replies[4], "s4:4");
}

TEST(CallBatcher, OnAClusterABatchKeepsToOneSlotAndClientsAreNotMerged) {
  Fixture f(/*cluster=*/true, /*connections=*/1);
  // {ns/a} and {ns/b} lie in different slots; the shards of {ns/a} too (their own tags).
  const std::string a = "dq:{ns/a}:", b = "dq:{ns/b}:";
  ASSERT_NE(KeySlot(a), KeySlot(b));
  f.Add(Script::kPublish, a, {"1"}, 7, "a1");
  f.Add(Script::kPublish, b, {"2"}, 7, "b1");
  f.Add(Script::kPublish, a, {"3"}, 7, "a2");
  f.Add(Script::kPublish, a, {"4"}, 8, "other client");
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 3u);
  EXPECT_EQ(f.sent[0].keys, (std::vector<std::string>{a}));
  EXPECT_EQ(f.sent[0].args,
            (std::vector<std::string>{"publish", "1", "1", "1", "1", "1", "1", "3"}));
  EXPECT_EQ(f.sent[1].keys, (std::vector<std::string>{b}));
  EXPECT_EQ(f.sent[1].script, Script::kPublish);  // alone: the plain call
  EXPECT_EQ(f.sent[2].affinity, 8u);
}

TEST(CallBatcher, ClientsOnOneConnectionShareACallAndOneJobConsumesOfAQueueBecomeOne) {
  Fixture f(/*cluster=*/false, /*connections=*/2);
  // Three consumers' CONSUMEs met in one iteration: clients 1 and 3 share connection 1.
  for (uint64_t client : {1, 2, 3}) {
    const std::vector<std::string_view> args = {"1000", "30000", "1"};
    f.batcher.Add(Script::kConsume, kQ, args, client,
                  [&f](const UpstreamResult& r) { f.replies.push_back(ConsumeReply(r)); });
  }
  f.Add(Script::kAck, kQ, {"1", "A", ""}, 5, "a");
  f.Add(Script::kAck, "dq:{ns/other}:", {"1", "B", ""}, 7, "b");
  f.batcher.SendAll();
  ASSERT_EQ(f.sent.size(), 3u);
  EXPECT_EQ(f.sent[0].script, Script::kConsume);  // clients 1 and 3: one consume of COUNT 2
  EXPECT_EQ(f.sent[0].args, (std::vector<std::string>{"1000", "30000", "2"}));
  EXPECT_EQ(f.sent[1].script, Script::kConsume);  // client 2 alone
  EXPECT_EQ(f.sent[1].affinity, 2u);
  EXPECT_EQ(f.sent[2].script, Script::kBatchFree);  // clients 5 and 7: acks of two queues
  EXPECT_EQ(f.sent[2].keys, (std::vector<std::string>{kQ, "dq:{ns/other}:"}));
}

}  // namespace
}  // namespace deferq::persist
