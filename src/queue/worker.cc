#include "queue/worker.h"

namespace deferq::queue {

Worker::Worker(const Config& config, ClientPort& port, Peers& peers, InstanceFlags& flags,
               WaiterOrder& order, CallDirectory& calls, LatenessStats& lateness,
               ShardPumpTable& shard_pumps, int thread_index, int threads)
    : Loop(config, port, peers, flags, thread_index, threads),
      shard_pumps_(shard_pumps),
      waiters_(*this, order),
      calls_(*this, calls),
      pump_(*this, waiters_, lateness, shard_pumps) {}

Worker::~Worker() = default;

void Worker::AddPool(std::unique_ptr<persist::PoolClient> pool) {
  // Cross-instance wake-ups: one thread per instance listens on the pool's channel, where the
  // storage scripts announce queues that got ready jobs while some instance has consumers
  // blocked on them (docs/architecture.md).
  if (thread_index_ == 0 && config_.cross_instance_wake) {
    pool->Subscribe(
        std::string(kReadyChannel),
        [this](std::string_view news) {
          if (news.starts_with(kWaitNews)) {
            // Consumers now wait on the queue (Waiters::MarkBlocked): its pump, if this instance
            // runs it, moves the jobs due by now and from then on keeps their due ms.
            const std::string tag(news.substr(kWaitNews.size()));
            if (pump_.Follows(tag)) pump_.Route(tag, wall_ms());
            return;
          }
          if (news.starts_with(kEmptyNews)) {
            waiters_.OnEmptied(std::string(news.substr(kEmptyNews.size())));
            return;
          }
          if (news.starts_with(kDoneNews)) {
            // A job someone waits for finished: to the threads parking calls for it.
            calls_.Route(news);
            return;
          }
          waiters_.OnChannelNews(std::string(news));
        },
        [this] { flags_.Resubscribed(); });
  }
  pools_.push_back(std::move(pool));
}

void Worker::Tick(int64_t now_ms, int64_t wall_ms) {
  SetClock(now_ms, wall_ms);
  for (auto& p : pools_) p->Tick();
  waiters_.Tick();
  calls_.Tick();
  pump_.Tick();
  // Loop 0 shares the pumping of sharded queues' shards with the other instances.
  if (thread_index_ == 0 && shard_pumps_.size() > 0) {
    if (!shard_pumping_)
      shard_pumping_ = std::make_unique<ShardPumping>(*this, pump_, shard_pumps_);
    shard_pumping_->Tick();
  }
  auth_throttle_.Release(now_ms);
}

}  // namespace deferq::queue
