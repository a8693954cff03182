// Fixtures shared by the integration tests: a fresh deferq per test, and for the suites that
// compare behaviour with Redis, one reference redis-server per suite.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <string_view>

#include "hiredis_client.h"
#include "raw_connection.h"
#include "resp_reader.h"
#include "server_process.h"

namespace deferq::testing {

// A deferq started for each test (they are cheap to start), so no test sees another's clients.
class DeferqTest : public ::testing::Test {
 protected:
  // Override to start the server with a config or other flags.
  virtual DeferqOptions Options() const { return {}; }

  void SetUp() override {
    server_ = ServerProcess::StartDeferq(Options());
    ASSERT_NE(server_, nullptr) << "deferq did not start";
  }

  uint16_t port() const { return server_->port(); }
  RedisContextPtr Connect() {
    RedisContextPtr context = ConnectHiredis(port());
    EXPECT_NE(context, nullptr) << "cannot connect to deferq on port " << port();
    return context;
  }

  std::unique_ptr<ServerProcess> server_;
};

// Adds a redis-server 7 started once per suite, for byte-for-byte comparisons where the spec says
// deferq behaves as Redis does.
class RedisParityTest : public DeferqTest {
 protected:
  static void SetUpTestSuite() { redis_ = ServerProcess::StartRedis(); }
  static void TearDownTestSuite() { redis_.reset(); }

  void SetUp() override {
    ASSERT_NE(redis_, nullptr) << "the reference redis-server did not start";
    DeferqTest::SetUp();
  }

  static uint16_t redis_port() { return redis_->port(); }

  static inline std::unique_ptr<ServerProcess> redis_;
};

// Two deferq instances of 4 loop threads each (connections spread over the loops:
// SO_REUSEPORT) on one redis-server started once per suite: what crosses threads and instances.
class TwoInstancesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { redis_ = ServerProcess::StartRedis(); }
  static void TearDownTestSuite() { redis_.reset(); }

  void SetUp() override {
    ASSERT_NE(redis_, nullptr) << "redis-server did not start";
    for (auto* d : {&a_, &b_}) {
      DeferqOptions options = WithConfig(DefaultPoolToml(redis_->port()));
      options.threads = 4;
      *d = ServerProcess::StartDeferq(options);
      ASSERT_NE(*d, nullptr);
    }
  }

  static inline std::unique_ptr<ServerProcess> redis_;
  std::unique_ptr<ServerProcess> a_, b_;
};

// Sends `request` on a fresh connection and returns the bytes of the first `replies` replies.
inline std::string Transcript(uint16_t port, std::string_view request, size_t replies) {
  RawConnection connection(port);
  if (!connection.connected()) return "(connect failed)";
  return connection.Exchange(request, replies, 3s);
}

// Sends `request` on a fresh connection and returns everything received until the server closed
// the connection; "(open)" is appended when it was still open after the timeout.
inline std::string TranscriptUntilClose(uint16_t port, std::string_view request,
                                        std::chrono::milliseconds timeout = 3s) {
  RawConnection connection(port);
  if (!connection.connected()) return "(connect failed)";
  connection.Send(request, timeout);
  RawConnection::End end;
  std::string bytes = connection.ReadUntilClosed(timeout, &end);
  return end == RawConnection::End::kTimeout ? bytes + "(open)" : bytes;
}

}  // namespace deferq::testing

// Compares deferq's bytes with Redis's for the same request, showing both readably.
#define EXPECT_SAME_AS_REDIS(deferq_bytes, redis_bytes, request)                                   \
  EXPECT_EQ(::deferq::testing::Printable(deferq_bytes), ::deferq::testing::Printable(redis_bytes)) \
      << "request: " << ::deferq::testing::Printable(request)
