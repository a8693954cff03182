#include "queue/service.h"

#include <cstdlib>
#include <cstring>

#include "base/clock.h"
#include "queue/commands/auth.h"
#include "queue/delivery/pump.h"
#include "queue/delivery/shard_pump.h"
#include "queue/delivery/waiters.h"
#include "queue/stats/lateness.h"
#include "queue/stats/queue_stats.h"
#include "queue/tenancy/tokens.h"
#include "queue/worker.h"

namespace deferq::queue {

namespace {

class InstanceImpl final : public Instance {
 public:
  explicit InstanceImpl(const Config& config)
      : lateness_(config.metrics_max_queues),
        queue_stats_(config.metrics_max_queues),
        shard_pumps_(config) {
    // The admin password is read once, from the environment only (never argv or the file), and
    // kept only as its SHA-256 digest. The variable's value is then wiped where the kernel shows
    // it (/proc/PID/environ, `ps e`) and the variable removed.
    if (char* pw = getenv(config.admin_password_env.c_str()); pw != nullptr && *pw != '\0') {
      admin_digest_ = DigestHex(pw);
      memset(pw, 0, strlen(pw));
    }
    unsetenv(config.admin_password_env.c_str());
  }

  int64_t blocked() const override { return order_.blocked() + calls_.parked(); }
  LatenessStats& lateness() override { return lateness_; }
  QueueStatsBook& queue_stats() override { return queue_stats_; }
  bool CheckAdminPassword(std::string_view password) const override {
    if (admin_digest_.empty()) return false;
    // Digests of equal length compared in constant time: timing reveals nothing of the password.
    return DigestEquals(DigestHex(password), admin_digest_);
  }
  bool pump_owner() const override { return flags_.IsPumpOwner(base::MonotonicMs()); }
  int64_t pumped_shards() const override { return shard_pumps_.owned(); }
  uint64_t auth_failures() const override { return AuthFailures(); }

  InstanceFlags& flags() { return flags_; }
  WaiterOrder& order() { return order_; }
  CallDirectory& calls() { return calls_; }
  ShardPumpTable& shard_pumps() { return shard_pumps_; }

 private:
  std::string admin_digest_;  // SHA-256 (hex) of the admin password; empty: none set
  LatenessStats lateness_;
  QueueStatsBook queue_stats_;
  // The consumers blocked anywhere in this instance, oldest first per queue (every loop's
  // Waiters registers there).
  InstanceFlags flags_;  // what every thread reads: pump ownership, subscription epoch, book
  WaiterOrder order_;
  // Which threads park CALL / WAITJOB requesters for which jobs (queue/delivery/calls.h).
  CallDirectory calls_;
  // Which shards of the sharded queues this instance pumps (loop 0 writes, every Pump reads).
  ShardPumpTable shard_pumps_;
};

class ServiceImpl final : public Service {
 public:
  ServiceImpl(const ServiceSetup& s, std::vector<std::unique_ptr<persist::PoolClient>> pools,
              int64_t now_ms, int64_t wall_ms)
      : server_(s.server),
        instance_(s.instance),
        worker_(s.config, s.port, s.peers, static_cast<InstanceImpl&>(s.instance).flags(),
                static_cast<InstanceImpl&>(s.instance).order(),
                static_cast<InstanceImpl&>(s.instance).calls(), s.instance.lateness(),
                static_cast<InstanceImpl&>(s.instance).shard_pumps(), s.thread_index, s.threads) {
    worker_.SetClock(now_ms, wall_ms);
    for (auto& pool : pools) worker_.AddPool(std::move(pool));
    if (s.thread_index == 0 && s.config.queue_stats) {
      queue_stats_ = std::make_unique<QueueStatsPoller>(
          worker_, s.instance.queue_stats(), s.max_exported_queues, &s.instance.lateness());
    }
  }

  CommandContext Context(Session& session, proto::ReplyWriter& reply, ClientPort* client) override {
    return CommandContext{.session = session,
                          .reply = reply,
                          .server = server_,
                          .loop = &worker_,
                          .instance = &instance_,
                          .client = client};
  }
  void SetClock(int64_t now_ms, int64_t wall_ms) override { worker_.SetClock(now_ms, wall_ms); }
  void OnLoopTick(int64_t now_ms, int64_t wall_ms, bool stopping) override {
    worker_.Tick(now_ms, wall_ms);
    if (queue_stats_ && !stopping) queue_stats_->Tick();
  }
  void OnHintsDropped(int64_t now_ms, int64_t wall_ms) override {
    worker_.waiters().OnHintsDropped();
    worker_.calls().OnHintsDropped();
    worker_.Tick(now_ms, wall_ms);
  }
  size_t RunTimers() override {
    worker_.pump().RunTimers();
    return worker_.pump().timers();
  }
  int64_t NextWakeup() const override { return worker_.pump().NextWakeup(); }
  void RunNote(const LoopNote& note) override { note(worker_); }
  void OnClientGone(uint64_t client_id) override {
    worker_.waiters().OnClientGone(client_id);
    worker_.calls().OnClientGone(client_id);
  }
  void Flush() override {
    for (const auto& p : worker_.pools()) p->Flush();
  }
  void ReleaseWaiters() override {
    worker_.waiters().ReleaseAll();
    worker_.calls().ReleaseAll();
  }
  void Shutdown() override {
    for (const auto& p : worker_.pools()) p->Shutdown();
  }
  bool quiescent() const override {
    for (const auto& p : worker_.pools()) {
      if (!p->quiescent()) return false;
    }
    return true;
  }

 private:
  ServerContext& server_;
  Instance& instance_;
  Worker worker_;
  std::unique_ptr<QueueStatsPoller> queue_stats_;  // loop 0: per-queue figures
};

}  // namespace

std::unique_ptr<Instance> NewInstance(const Config& config) {
  return std::make_unique<InstanceImpl>(config);
}

std::unique_ptr<Service> NewService(const ServiceSetup& setup,
                                    std::vector<std::unique_ptr<persist::PoolClient>> pools,
                                    int64_t now_ms, int64_t wall_ms) {
  return std::make_unique<ServiceImpl>(setup, std::move(pools), now_ms, wall_ms);
}

}  // namespace deferq::queue
