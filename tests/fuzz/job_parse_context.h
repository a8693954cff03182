// A CommandContext for driving the job commands' parsers (queue/commands/job_requests.h) outside a
// server: a real Worker with no pools, a real Session and ReplyWriter, and the interfaces a Worker
// needs (ClientPort, Peers, ServerContext, Instance) answering as an idle single-thread server
// would. The parsers read the session, the configuration and the clock, and write errors to the
// reply; they never reach the rest, so nothing here has to behave beyond being there. The unit
// tests of the Worker's parts (Pump, PumpOwnership...) give its Worker a fake pool
// (tests/unit/support/fake_pool.h) and drive its clock. Header-only: the fuzz target
// (tests/fuzz/job_requests_fuzz.cc) and the unit tests include it.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "queue/commands/commands.h"
#include "queue/context/client_port.h"
#include "queue/context/instance.h"
#include "queue/context/server_context.h"
#include "queue/stats/lateness.h"
#include "queue/stats/queue_stats.h"
#include "queue/worker.h"

namespace deferq::queue {

class JobParseContext final : public ClientPort,
                              public Peers,
                              public ServerContext,
                              public Instance {
 public:
  static constexpr int64_t kWallMs = 1'795'000'000'000;  // a fixed clock (2026)

  explicit JobParseContext(const Config& cfg) : cfg_(cfg) { worker_.SetClock(1000, kWallMs); }

  CommandContext& ctx() { return ctx_; }
  // The error the last parser answered ("" when it accepted), without '-' and CRLF; clears it.
  std::string TakeError() {
    std::string e;
    if (out_.size() > 3 && out_[0] == '-') e = out_.substr(1, out_.size() - 3);
    out_.clear();
    return e;
  }
  bool replied() const { return !out_.empty(); }
  // Everything answered at once since the last take, RESP2; clears it.
  std::string TakeOut() { return std::exchange(out_, {}); }
  Worker& worker() { return worker_; }
  InstanceFlags& flags() { return flags_; }

  // The deferred replies written so far (a command that waits for Redis, EXEC), RESP2, and how
  // many; taken and cleared.
  std::string TakeDeferred() { return std::exchange(deferred_out_, {}); }
  int deferred_finished() const { return deferred_finished_; }

  // ClientPort
  ReplyTicket Defer(bool) override { return {.slot = 1, .gen = 1, .seq = ++deferred_seq_}; }
  proto::ReplyWriter* Begin(const ReplyTicket&) override { return &deferred_; }
  void Finish(const ReplyTicket&) override { ++deferred_finished_; }
  bool Connected(const ReplyTicket&) const override { return true; }
  // Peers
  void Post(int, LoopNote) override {}
  const std::string& instance_id() const override { return instance_; }
  // ServerContext
  const Config& config() const override { return cfg_; }
  int threads() const override { return 1; }
  uint16_t port() const override { return cfg_.listen_port; }
  int64_t start_time_ms() const override { return kWallMs; }
  ServerStatsSnapshot Stats() const override { return {}; }
  std::string DescribeClient(const Session&) const override { return ""; }
  void QueryClients(ClientsQuery, ClientsDone) override {}
  std::vector<PoolSnapshot> Pools() const override { return {}; }
  // Instance
  int64_t blocked() const override { return 0; }
  LatenessStats& lateness() override { return lateness_; }
  QueueStatsBook& queue_stats() override { return queue_stats_; }
  bool CheckAdminPassword(std::string_view) const override { return false; }
  bool pump_owner() const override { return false; }
  int64_t pumped_shards() const override { return 0; }
  uint64_t auth_failures() const override { return 0; }

 private:
  const Config cfg_;
  std::string instance_ = "parse-context";
  InstanceFlags flags_;
  WaiterOrder order_;
  CallDirectory calls_;
  LatenessStats lateness_;
  QueueStatsBook queue_stats_;
  ShardPumpTable shard_pumps_{cfg_};
  Session session_;
  std::string out_;
  proto::ReplyWriter reply_{&out_, 2};
  std::string deferred_out_;
  proto::ReplyWriter deferred_{&deferred_out_, 2};
  uint64_t deferred_seq_ = 0;
  int deferred_finished_ = 0;
  Worker worker_{cfg_, *this, *this, flags_, order_, calls_, lateness_, shard_pumps_, 0, 1};
  CommandContext ctx_{.session = session_,
                      .reply = reply_,
                      .server = *this,
                      .loop = &worker_,
                      .instance = this,
                      .client = this};
};

}  // namespace deferq::queue
