// OwedReply (queue/context/client_port.h): a reply owed after a round trip is written and settled
// once, and a client that left gets neither a write nor a Finish (the ClientPort contract).
#include <gtest/gtest.h>

#include <string>

#include "queue/context/client_port.h"

namespace deferq::queue {
namespace {

class FakePort final : public ClientPort {
 public:
  ReplyTicket Defer(bool blocking) override {
    ++deferred;
    last_blocking = blocking;
    return ReplyTicket{1, 2, 3, 4};
  }
  proto::ReplyWriter* Begin(const ReplyTicket& ticket) override {
    ++begun;
    EXPECT_EQ(ticket.seq, 3u);
    return connected ? &writer : nullptr;
  }
  void Finish(const ReplyTicket&) override { ++finished; }
  bool Connected(const ReplyTicket&) const override { return connected; }

  bool connected = true;
  bool last_blocking = false;
  int deferred = 0, begun = 0, finished = 0;
  std::string out;
  proto::ReplyWriter writer{&out, 2};
};

TEST(OwedReply, WritesAndSettlesOnce) {
  FakePort port;
  const OwedReply owed = OwedReply::Owe(&port, /*blocking=*/true);
  EXPECT_EQ(port.deferred, 1);
  EXPECT_TRUE(port.last_blocking);
  EXPECT_TRUE(owed.Write([](proto::ReplyWriter& w) { w.Integer(7); }));
  EXPECT_EQ(port.out, ":7\r\n");
  EXPECT_EQ(port.finished, 1);
}

TEST(OwedReply, ErrorIsAReplyToo) {
  FakePort port;
  const OwedReply owed = OwedReply::Owe(&port, /*blocking=*/false);
  owed.Error("ERR boom");
  EXPECT_EQ(port.out, "-ERR boom\r\n");
  EXPECT_EQ(port.finished, 1);
}

TEST(OwedReply, AClientThatLeftGetsNoWriteAndNoFinish) {
  FakePort port;
  const OwedReply owed = OwedReply::Owe(&port, /*blocking=*/false);
  port.connected = false;
  bool filled = false;
  EXPECT_FALSE(owed.Write([&](proto::ReplyWriter&) { filled = true; }));
  owed.Error("ERR boom");
  EXPECT_FALSE(filled);
  EXPECT_EQ(port.begun, 2);
  EXPECT_EQ(port.finished, 0);
  EXPECT_TRUE(port.out.empty());
}

}  // namespace
}  // namespace deferq::queue
