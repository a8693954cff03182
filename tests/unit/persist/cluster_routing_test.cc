// ClusterPool's routing over fake node links (persist/upstream_link.h): the slot map, MOVED and
// ASK, the retries of refused requests with their backoff, what is never resent, the slot map
// refresh, and the pool-wide due-index read fanned out per master. No Redis: every request is
// recorded with the node it went to, and the test answers it in RESP (read by hiredis's reader).
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "io/io_ring.h"
#include "persist/cluster_map.h"
#include "persist/cluster_pool.h"
#include "persist/cluster_slots.h"
#include "unit/support/resp.h"

namespace deferq::persist {
namespace {

using testing::ParseResp;

// A ring that is never run: only its clock, which the test sets.
class TestClock : public io::IoRing {
 public:
  void Set(int64_t ms) { now_ms_ = ms; }
};

// Every link the pool opens, and every request sent on one.
class FakeNodes {
 public:
  struct Sent {
    std::string node;  // "host:port"
    std::vector<std::string> words;
    Script script = Script::kCount;
    uint64_t affinity = 0;
    UpstreamCallback cb;
  };

  class Link final : public UpstreamLink {
   public:
    Link(FakeNodes* nodes, std::string node) : nodes_(nodes), node_(std::move(node)) {}
    void Send(std::string request, Script script, uint64_t affinity, UpstreamCallback cb) override {
      Sent s{node_, {}, script, affinity, std::move(cb)};
      auto r = ParseResp(request);
      for (size_t i = 0; i < r->elements; ++i) {
        s.words.emplace_back(r->element[i]->str, r->element[i]->len);
      }
      nodes_->sent.push_back(std::move(s));
    }
    bool ready() const override { return !shut; }
    bool accepting() const override { return !shut; }
    void Flush() override {}
    void Tick() override {}
    void Shutdown() override { shut = true; }
    bool quiescent() const override { return true; }
    bool shut = false;

   private:
    FakeNodes* nodes_;
    std::string node_;
  };

  LinkFactory Factory() {
    return [this](const Endpoint& addr, const RedisUrl&, LinkOptions) {
      auto link = std::make_unique<Link>(this, addr.host + ":" + std::to_string(addr.port));
      links.push_back(link.get());
      return link;
    };
  }

  // Answers request i with a RESP reply; the callback may send more (sent grows).
  void Answer(size_t i, std::string_view resp) {
    UpstreamCallback cb = std::move(sent.at(i).cb);
    ASSERT_TRUE(cb) << "request " << i << " was answered already";
    auto r = ParseResp(resp);
    cb(UpstreamResult{r.get(), {}});
  }
  // Fails request i the way a connection does (no reply).
  void Fail(size_t i, std::string_view error) {
    UpstreamCallback cb = std::move(sent.at(i).cb);
    ASSERT_TRUE(cb);
    cb(UpstreamResult{nullptr, error});
  }
  // Indices of the requests whose first word is `word` (FCALLs: whose script is `script`).
  std::vector<size_t> Of(std::string_view word, Script script = Script::kCount) const {
    std::vector<size_t> out;
    for (size_t i = 0; i < sent.size(); ++i) {
      if (!sent[i].words.empty() && sent[i].words[0] == word && sent[i].script == script) {
        out.push_back(i);
      }
    }
    return out;
  }

  std::vector<Sent> sent;
  std::vector<Link*> links;
};

constexpr std::string_view kNodeA = "127.0.0.1:7001";  // slots 0..8191
constexpr std::string_view kNodeB = "127.0.0.1:7002";  // slots 8192..16383

// A queue prefix whose slot is served by node B (or A).
std::string PrefixOn(bool node_b) {
  for (int i = 0;; ++i) {
    std::string prefix = "dq:{default/q" + std::to_string(i) + "}:";
    if ((KeySlot(prefix) >= 8192) == node_b) return prefix;
  }
}

std::string Resp(std::string_view simple) { return "+" + std::string(simple) + "\r\n"; }
std::string RespError(std::string_view error) { return "-" + std::string(error) + "\r\n"; }

class ClusterRoutingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto setup = std::make_shared<ClusterSetup>();
    Endpoint a, b;
    ASSERT_TRUE(NumericEndpoint("127.0.0.1", 7001, &a));
    ASSERT_TRUE(NumericEndpoint("127.0.0.1", 7002, &b));
    setup->seeds = {a};
    setup->masters = {a, b};
    setup->slot_master.assign(kClusterSlots, 0);
    for (int s = 8192; s < kClusterSlots; ++s) setup->slot_master[s] = 1;
    setup_ = setup;
    clock_.Set(1000);
    pool_ = std::make_unique<ClusterPool>(clock_, "p", /*connections=*/1, /*timeout_ms=*/1000,
                                          &stats_, setup, nullptr, nodes_.Factory());
  }

  // One FCALL of publish on `prefix`; its result lands in *out.
  void Publish(const std::string& prefix, std::string* out) {
    const std::string_view keys[] = {prefix};
    const std::string_view args[] = {"payload"};
    pool_->Eval(Script::kPublish, keys, args, /*affinity=*/7, [out](const UpstreamResult& r) {
      *out = r.reply != nullptr ? std::string(r.reply->str, r.reply->len) : std::string(r.error);
    });
  }

  TestClock clock_;
  PoolStats stats_;
  FakeNodes nodes_;
  std::shared_ptr<ClusterSetup> setup_;
  std::unique_ptr<ClusterPool> pool_;
};

TEST_F(ClusterRoutingTest, EachRequestGoesToTheMasterOfItsKeysSlot) {
  std::string on_a, on_b, got;
  Publish(PrefixOn(false), &on_a);
  Publish(PrefixOn(true), &on_b);
  const std::string key = PrefixOn(true) + "counts";
  const std::string_view get[] = {"HGETALL", key};
  pool_->Command(get, 0, [&got](const UpstreamResult& r) { got = r.reply->str; });
  ASSERT_EQ(nodes_.sent.size(), 3u);
  EXPECT_EQ(nodes_.sent[0].node, kNodeA);
  EXPECT_EQ(nodes_.sent[1].node, kNodeB);
  EXPECT_EQ(nodes_.sent[2].node, kNodeB);
  // FCALL <function> <numkeys> <queue prefix> <the slot's registry and due keys> args.
  EXPECT_EQ(nodes_.sent[1].words[0], "FCALL");
  EXPECT_EQ(nodes_.sent[1].words[3], PrefixOn(true));
  EXPECT_EQ(nodes_.sent[1].words[4], SlotRegistryKey(KeySlot(PrefixOn(true))));
  EXPECT_EQ(nodes_.sent[1].words[5], SlotDueKey(KeySlot(PrefixOn(true))));
  nodes_.Answer(1, Resp("published"));
  nodes_.Answer(2, Resp("counts"));
  EXPECT_EQ(on_b, "published");
  EXPECT_EQ(got, "counts");
  EXPECT_EQ(on_a, "");  // still pending
  // A script call marks its slot as one that holds queues (the due-index reads cover it).
  EXPECT_TRUE(setup_->active.Test(KeySlot(PrefixOn(true))));
}

TEST_F(ClusterRoutingTest, MovedResendsToTheNewMasterAndUpdatesTheMap) {
  const std::string prefix = PrefixOn(true);
  const int slot = KeySlot(prefix);
  std::string out;
  Publish(prefix, &out);
  nodes_.Answer(0, RespError("MOVED " + std::to_string(slot) + " " + std::string(kNodeA)));
  ASSERT_EQ(nodes_.sent.size(), 2u);
  EXPECT_EQ(nodes_.sent[1].node, kNodeA);
  EXPECT_EQ(nodes_.sent[1].words, nodes_.sent[0].words);  // the same request
  EXPECT_EQ(out, "");                                     // the client never sees MOVED
  nodes_.Answer(1, Resp("published"));
  EXPECT_EQ(out, "published");
  // The next request of that slot goes to the new master at once...
  Publish(prefix, &out);
  EXPECT_EQ(nodes_.sent.back().node, kNodeA);
  // ...and a fresh slot map is asked for at the next flush.
  pool_->Flush();
  EXPECT_EQ(nodes_.Of("CLUSTER").size(), 1u);
}

TEST_F(ClusterRoutingTest, AskSendsAskingWithTheRequestAndLeavesTheMap) {
  const std::string prefix = PrefixOn(true);
  const int slot = KeySlot(prefix);
  std::string out;
  Publish(prefix, &out);
  nodes_.Answer(0, RespError("ASK " + std::to_string(slot) + " " + std::string(kNodeA)));
  ASSERT_EQ(nodes_.sent.size(), 3u);
  EXPECT_EQ(nodes_.sent[1].node, kNodeA);
  EXPECT_EQ(nodes_.sent[1].words, std::vector<std::string>{"ASKING"});
  EXPECT_EQ(nodes_.sent[2].node, kNodeA);
  EXPECT_EQ(nodes_.sent[2].words, nodes_.sent[0].words);
  // The pair shares one client queue of its own (not the caller's), so nothing comes between.
  EXPECT_EQ(nodes_.sent[1].affinity, nodes_.sent[2].affinity);
  EXPECT_NE(nodes_.sent[2].affinity, nodes_.sent[0].affinity);
  nodes_.Answer(1, Resp("OK"));
  nodes_.Answer(2, Resp("published"));
  EXPECT_EQ(out, "published");
  // The slot still belongs to B until the migration ends.
  Publish(prefix, &out);
  EXPECT_EQ(nodes_.sent.back().node, kNodeB);
}

TEST_F(ClusterRoutingTest, RefusedRequestsAreResentAfterABackoff) {
  for (std::string_view refusal : {"TRYAGAIN Multiple keys request during rehashing of slot",
                                   "CLUSTERDOWN The cluster is down"}) {
    nodes_.sent.clear();
    clock_.Set(1000);
    std::string out;
    Publish(PrefixOn(true), &out);
    nodes_.Answer(0, RespError(refusal));
    pool_->Flush();
    EXPECT_TRUE(nodes_.Of("FCALL", Script::kPublish).size() == 1) << refusal;
    clock_.Set(1024);
    pool_->Flush();
    EXPECT_EQ(nodes_.Of("FCALL", Script::kPublish).size(), 1u) << "resent before 25 ms";
    clock_.Set(1025);
    pool_->Flush();
    ASSERT_EQ(nodes_.Of("FCALL", Script::kPublish).size(), 2u) << refusal;
    nodes_.Answer(nodes_.Of("FCALL", Script::kPublish)[1], Resp("published"));
    EXPECT_EQ(out, "published");
  }
}

TEST_F(ClusterRoutingTest, ARequestRefusedTooLongFailsWithTheReason) {
  std::string out;
  Publish(PrefixOn(true), &out);
  int64_t now = 1000;
  for (int sends = 1; sends <= 8; ++sends) {
    auto fcalls = nodes_.Of("FCALL", Script::kPublish);
    ASSERT_EQ(fcalls.size(), static_cast<size_t>(sends));
    nodes_.Answer(fcalls.back(), RespError("CLUSTERDOWN The cluster is down"));
    now += 400;  // past any backoff step
    clock_.Set(now);
    pool_->Flush();
  }
  // One send and seven resends: about 1.6 s of backoff in all, then the caller's answer.
  EXPECT_EQ(nodes_.Of("FCALL", Script::kPublish).size(), 8u);
  EXPECT_EQ(out, "TRYAGAIN pool 'p' unavailable: CLUSTERDOWN The cluster is down");
  EXPECT_EQ(stats_.failures.load(), 1u);
}

TEST_F(ClusterRoutingTest, WhatWasNeverSentIsResentButATimeoutIsNot) {
  std::string unsent, timed_out;
  Publish(PrefixOn(true), &unsent);
  Publish(PrefixOn(false), &timed_out);
  nodes_.Fail(0, "TRYAGAIN pool 'p' unavailable");
  const std::string timeout = "TIMEOUT pool 'p' did not answer: the command may have been applied";
  nodes_.Fail(1, timeout);
  EXPECT_EQ(timed_out, timeout);  // it may have been applied: the client decides
  clock_.Set(1025);
  pool_->Flush();
  auto fcalls = nodes_.Of("FCALL", Script::kPublish);
  ASSERT_EQ(fcalls.size(), 3u);  // only the unsent one again
  EXPECT_EQ(nodes_.sent[fcalls[2]].node, kNodeB);
  nodes_.Answer(fcalls[2], Resp("published"));
  EXPECT_EQ(unsent, "published");
}

TEST_F(ClusterRoutingTest, ANewSlotMapMovesSlotsAndClosesNodesThatServeNone) {
  std::string out;
  Publish(PrefixOn(true), &out);  // opens B's link
  nodes_.Answer(0, Resp("published"));
  // Periodic refresh (every 10 s): node A answers that it serves every slot now.
  clock_.Set(1000 + 10000);
  pool_->Flush();
  auto asks = nodes_.Of("CLUSTER");
  ASSERT_EQ(asks.size(), 1u);
  nodes_.Answer(asks[0],
                "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:7001\r\n$2\r\nid\r\n");
  bool b_closed = false;
  for (const auto* link : nodes_.links) b_closed |= link->shut;
  EXPECT_TRUE(b_closed);
  Publish(PrefixOn(true), &out);
  EXPECT_EQ(nodes_.sent.back().node, kNodeA);
}

TEST_F(ClusterRoutingTest, TheDueIndexIsReadWithOneCallPerMasterAndMovedSlotsAlone) {
  const int slot_a = KeySlot(PrefixOn(false));
  const int slot_b = KeySlot(PrefixOn(true));
  setup_->active.Set(slot_a);
  setup_->active.Set(slot_b);
  DueRead got;
  bool answered = false;
  pool_->ReadDue(/*max_ms=*/5000, /*limit=*/10, 0, [&](const DueRead& r) {
    got = r;
    answered = true;
  });
  auto calls = nodes_.Of("FCALL", Script::kClusterDue);
  ASSERT_EQ(calls.size(), 2u);  // one per master, each with its slots' tags
  for (size_t i : calls) {
    const auto& w = nodes_.sent[i].words;
    EXPECT_EQ(w[2], "0");  // keyless
    EXPECT_EQ(w.back(), SlotTag(nodes_.sent[i].node == kNodeA ? slot_a : slot_b));
  }
  const size_t on_a = nodes_.sent[calls[0]].node == kNodeA ? calls[0] : calls[1];
  const size_t on_b = on_a == calls[0] ? calls[1] : calls[0];
  // A answers its entries; B reports its slot (position 1) as not served: read alone.
  nodes_.Answer(on_a, "*2\r\n*4\r\n$1\r\nx\r\n:3000\r\n$1\r\nw\r\n:4000\r\n*0\r\n");
  nodes_.Answer(on_b, "*2\r\n*0\r\n*1\r\n:1\r\n");
  EXPECT_FALSE(answered);
  auto alone = nodes_.Of("ZRANGEBYSCORE");
  ASSERT_EQ(alone.size(), 1u);
  EXPECT_EQ(nodes_.sent[alone[0]].words[1], SlotDueKey(slot_b));
  nodes_.Answer(alone[0], "*2\r\n$1\r\ny\r\n:1000\r\n");
  ASSERT_TRUE(answered);
  // Merged, earliest first.
  ASSERT_EQ(got.entries.size(), 3u);
  EXPECT_EQ(got.entries[0], (std::pair<std::string, int64_t>{"y", 1000}));
  EXPECT_EQ(got.entries[1], (std::pair<std::string, int64_t>{"x", 3000}));
  EXPECT_EQ(got.entries[2], (std::pair<std::string, int64_t>{"w", 4000}));
}

TEST(ClusterMapTest, RedirectionsAreReadFromTheErrorText) {
  Redirection moved = ReadRedirection("MOVED 3999 127.0.0.1:6381");
  EXPECT_EQ(moved.kind, Redirection::kMoved);
  EXPECT_EQ(moved.slot, 3999);
  EXPECT_EQ(moved.node, "127.0.0.1:6381");
  Redirection ask = ReadRedirection("ASK 0 ::1:7000");
  EXPECT_EQ(ask.kind, Redirection::kAsk);
  EXPECT_EQ(ask.node, "::1:7000");
  EXPECT_EQ(ReadRedirection("TRYAGAIN Multiple keys").kind, Redirection::kRefused);
  EXPECT_EQ(ReadRedirection("CLUSTERDOWN Hash slot not served").kind, Redirection::kRefused);
  EXPECT_EQ(ReadRedirection("ERR unknown command").kind, Redirection::kNone);
  EXPECT_EQ(ReadRedirection("MOVED 16384 127.0.0.1:1").kind, Redirection::kBad);
  EXPECT_EQ(ReadRedirection("MOVED x 127.0.0.1:1").kind, Redirection::kBad);
  EXPECT_EQ(ReadRedirection("MOVED 12").kind, Redirection::kBad);
  EXPECT_EQ(ReadRedirection("ASK 12 ").kind, Redirection::kBad);

  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(SplitHostPort("::1:7000", &host, &port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 7000);
  EXPECT_FALSE(SplitHostPort("127.0.0.1:0", &host, &port));
  EXPECT_FALSE(SplitHostPort(":7000", &host, &port));
  EXPECT_FALSE(SplitHostPort("127.0.0.1:70000", &host, &port));
}

TEST(ClusterMapTest, ClusterSlotsFillsTheMapAndRefusesOtherShapes) {
  auto reply = ParseResp(
      "*2\r\n"
      "*3\r\n:0\r\n:99\r\n*2\r\n$0\r\n\r\n:7001\r\n"
      "*4\r\n:100\r\n:16383\r\n*2\r\n$9\r\n127.0.0.2\r\n:7002\r\n*2\r\n$9\r\n127.0.0.3\r\n:"
      "7003\r\n");
  std::vector<std::pair<std::string, uint16_t>> masters;
  std::vector<int16_t> slot_master;
  ASSERT_TRUE(ParseClusterSlots(*reply, "10.0.0.1", &masters, &slot_master));
  ASSERT_EQ(masters.size(), 2u);  // replicas are not masters
  EXPECT_EQ(masters[0], (std::pair<std::string, uint16_t>{"10.0.0.1", 7001}));  // empty host
  EXPECT_EQ(masters[1], (std::pair<std::string, uint16_t>{"127.0.0.2", 7002}));
  EXPECT_EQ(slot_master[99], 0);
  EXPECT_EQ(slot_master[100], 1);
  EXPECT_EQ(slot_master[16383], 1);
  masters.clear();
  EXPECT_FALSE(ParseClusterSlots(*ParseResp("*1\r\n*3\r\n:5\r\n:2\r\n*2\r\n$1\r\nh\r\n:1\r\n"), "",
                                 &masters, &slot_master));  // start > end
  EXPECT_FALSE(ParseClusterSlots(*ParseResp("-ERR This instance has cluster support disabled\r\n"),
                                 "", &masters, &slot_master));
}

}  // namespace
}  // namespace deferq::persist
