#include "net/server.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "base/clock.h"
#include "base/log.h"
#include "base/thread_annotations.h"
#include "config/load.h"
#include "net/listener.h"
#include "net/metrics_exporter.h"
#include "persist/cluster_pool.h"
#include "persist/upstream_tls.h"

namespace deferq::net {

using base::RealtimeMs;

namespace {

// How long a start waits for its port while another socket holds it (WaitForPortFree).
constexpr int64_t kListenWaitMs = 10000;

// The loops' Init results, which the main thread waits for before it serves (or gives up).
struct LoopStartup {
  explicit LoopStartup(int loops) : ready(loops, 0), errors(loops) {}
  void Report(int loop, bool ok, std::string error) {
    {
      base::MutexLock lock(&mu);
      ready[loop] = ok ? 1 : -1;
      errors[loop] = std::move(error);
    }
    cv.NotifyAll();
  }
  // Once every loop has reported: the first failure's error, or "" when all started.
  std::string WaitAll() {
    base::MutexLock lock(&mu);
    while (std::find(ready.begin(), ready.end(), 0) != ready.end()) cv.Wait(&mu);
    for (size_t i = 0; i < ready.size(); ++i) {
      if (ready[i] < 0) return errors[i].empty() ? "a loop failed to start" : errors[i];
    }
    return {};
  }
  base::Mutex mu;
  base::CondVar cv;
  std::vector<int> ready DQ_GUARDED_BY(mu);  // per loop: 0 pending, 1 ok, -1 failed
  std::vector<std::string> errors DQ_GUARDED_BY(mu);
};

}  // namespace

Server::Server(const Config& config) : config_(config) {
  threads_ =
      config_.threads > 0 ? config_.threads : static_cast<int>(std::thread::hardware_concurrency());
  if (threads_ <= 0) threads_ = 1;
  limits_.max_args = config_.max_args;
  limits_.max_bulk_len = config_.max_bulk_len;
  {
    std::random_device rd;
    char buf[33];
    snprintf(buf, sizeof(buf), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
    instance_id_ = buf;
  }
  // Reads (and wipes) the admin password from the environment.
  instance_ = queue::NewInstance(config_);
}

Server::~Server() = default;

bool Server::AdmitClient() {
  const int64_t n = clients_.fetch_add(1, std::memory_order_relaxed);
  if (n >= static_cast<int64_t>(config_.max_clients)) {
    clients_.fetch_sub(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

queue::ServerStatsSnapshot Server::Stats() const {
  queue::ServerStatsSnapshot s;
  s.connected_clients = static_cast<uint64_t>(clients_.load(std::memory_order_relaxed));
  s.blocked_clients = static_cast<uint64_t>(std::max<int64_t>(0, instance_->blocked()));
  for (const auto& loop : loops_) {
    const LoopStats& l = loop->stats();
    s.total_connections_received += l.connections_received.load(std::memory_order_relaxed);
    s.rejected_connections += l.rejected_connections.load(std::memory_order_relaxed);
    s.total_commands_processed += l.commands.load(std::memory_order_relaxed);
    s.total_net_input_bytes += l.net_input_bytes.load(std::memory_order_relaxed);
    s.total_net_output_bytes += l.net_output_bytes.load(std::memory_order_relaxed);
    s.protocol_errors += l.protocol_errors.load(std::memory_order_relaxed);
    s.output_limit_disconnections += l.output_limit_disconnections.load(std::memory_order_relaxed);
    s.query_limit_disconnections += l.query_limit_disconnections.load(std::memory_order_relaxed);
    s.auth_timeout_disconnections += l.auth_timeout_disconnections.load(std::memory_order_relaxed);
    s.unauthenticated_evictions += l.unauthenticated_evictions.load(std::memory_order_relaxed);
  }
  s.auth_failures = instance_->auth_failures();
  s.pump_owner = instance_->pump_owner();
  s.pump_shards = instance_->pumped_shards();
  return s;
}

std::string Server::RenderMetrics() { return net::RenderMetrics(*this); }

bool Server::CheckHealth(std::string* reason) const { return net::CheckHealth(*this, reason); }

uint64_t Server::WheelTimers() const {
  uint64_t n = 0;
  for (const auto& loop : loops_) n += loop->stats().wheel_timers.load(std::memory_order_relaxed);
  return n;
}

std::string Server::DescribeClient(const queue::Session& session) const {
  std::string out;
  if (EventLoop* loop = EventLoop::current()) loop->DescribeOwnClient(session.id, &out);
  return out;
}

void Server::QueryClients(queue::ClientsQuery query, queue::ClientsDone done) {
  EventLoop* loop = EventLoop::current();
  if (loop == nullptr) {
    queue::ClientsReport report;
    report.error = "ERR client queries run on a loop thread only";
    return done(report);
  }
  loop->StartClientsQuery(std::move(query), std::move(done));
}

void Server::Post(int thread, queue::LoopNote note) {
  loops_[static_cast<size_t>(thread)]->mailbox().PostHint(std::move(note));
}

void Server::Reload() {
  // Reloadable: server.loglevel (docs/operations.md "Signals"). Everything else is read once at
  // start; a changed value waits for the next restart.
  if (config_.config_file.empty()) {
    DQ_LOG(kInfo, "SIGHUP received: no config file to reload (loglevel stays %s)",
           base::LogLevelName(base::MinLogLevel()));
    return;
  }
  Config fresh;
  std::string error;
  if (!LoadConfigFile(config_.config_file, &fresh, &error)) {
    DQ_LOG(kError, "SIGHUP received: %s; nothing reloaded", error.c_str());
    return;
  }
  if (config_.tls_listen_port != 0) {
    // The files named at startup, or new names in the file: a rotated certificate is served to
    // connections accepted from now on; connected clients keep their session.
    if (!LoadTlsContext(fresh, &error)) {
      DQ_LOG(kError, "SIGHUP received: %s; the TLS certificate stays as it was", error.c_str());
    } else {
      DQ_LOG(kWarning, "SIGHUP received: TLS certificate %s loaded for new connections",
             fresh.tls_cert_file.c_str());
    }
  }
  if (!LoadUpstreamTls(fresh, &error)) {
    DQ_LOG(kError, "SIGHUP received: %s; TLS to Redis stays as it was", error.c_str());
  }
  const base::LogLevel before = base::MinLogLevel();
  base::SetMinLogLevel(fresh.log_level);
  DQ_LOG(kWarning,
         "SIGHUP received: reloaded %s: loglevel %s -> %s (other settings take effect at the "
         "next restart)",
         config_.config_file.c_str(), base::LogLevelName(before),
         base::LogLevelName(fresh.log_level));
}

bool Server::LoadTlsContext(const Config& config, std::string* error) {
  std::shared_ptr<io::TlsContext> context =
      io::TlsContext::ForServer({.cert_file = config.tls_cert_file,
                                 .key_file = config.tls_key_file,
                                 .ca_file = config.tls_client_ca_file},
                                error);
  if (context == nullptr) return false;
  tls_context_.store(std::move(context));
  return true;
}

bool Server::LoadUpstreamTls(const Config& config, std::string* error) {
  const bool used = std::any_of(pools_.begin(), pools_.end(),
                                [](const persist::ResolvedPool& p) { return p.url.tls; });
  if (!used) return true;
  std::shared_ptr<io::TlsContext> context =
      io::TlsContext::ForClient({.cert_file = config.tls_upstream_cert_file,
                                 .key_file = config.tls_upstream_key_file,
                                 .ca_file = config.tls_upstream_ca_file},
                                error);
  if (context == nullptr) return false;
  persist::SetUpstreamTls(std::move(context));
  return true;
}

std::vector<queue::PoolSnapshot> Server::Pools() const {
  std::vector<queue::PoolSnapshot> out;
  for (const persist::ResolvedPool& p : pools_) {
    queue::PoolSnapshot s;
    s.name = p.name;
    s.addr = persist::PoolAddress(p);
    // The pub/sub connection of cross-instance wake-ups counts too.
    // On a cluster: per master (as mapped at startup), per thread.
    const size_t nodes = p.cluster ? std::max<size_t>(1, p.cluster->masters.size()) : 1;
    s.connections =
        static_cast<int>(nodes) * p.connections * threads_ + (config_.cross_instance_wake ? 1 : 0);
    s.connections_up = p.stats->connections_up.load(std::memory_order_relaxed);
    s.inflight = p.stats->inflight.load(std::memory_order_relaxed);
    s.latency_us = p.stats->latency_us.load(std::memory_order_relaxed);
    s.requests = p.stats->requests.load(std::memory_order_relaxed);
    s.failures = p.stats->failures.load(std::memory_order_relaxed);
    s.timeouts = p.stats->timeouts.load(std::memory_order_relaxed);
    s.unreplicated = p.stats->unreplicated.load(std::memory_order_relaxed);
    s.refused = p.stats->refused.load(std::memory_order_relaxed);
    s.writes = p.stats->refusing_writes.load(std::memory_order_relaxed) > 0 ? "evicting"
               : p.stats->cannot_persist.load(std::memory_order_relaxed)    ? "misconf"
               : p.stats->out_of_memory.load(std::memory_order_relaxed)     ? "full"
                                                                            : "ok";
    s.refused_evicting = p.stats->refused_policy.load(std::memory_order_relaxed);
    s.refused_oom = p.stats->refused_oom.load(std::memory_order_relaxed);
    s.refused_misconf = p.stats->refused_misconf.load(std::memory_order_relaxed);
    out.push_back(std::move(s));
  }
  return out;
}

int Server::Run() {
  start_time_ms_ = RealtimeMs();
  std::string error;
  if (!WaitForPortFree(config_.listen_host, config_.listen_port, kListenWaitMs, &error)) {
    DQ_LOG(kError, "%s", error.c_str());
    return 1;
  }
  if (config_.tls_listen_port != 0) {
    if (!WaitForPortFree(config_.tls_listen_host, config_.tls_listen_port, kListenWaitMs, &error) ||
        !LoadTlsContext(config_, &error)) {
      DQ_LOG(kError, "refusing to start: %s", error.c_str());
      return 1;
    }
  }
  // Pools: resolved and checked here, on the main thread, where blocking is fine. Every upstream
  // connection runs the same checks again before it carries traffic (persist/handshake.h); this
  // one exists for a clear refusal at startup when Redis is already up.
  // The storage library carries the retention (persist/scripts.h): set before anything uses it.
  persist::ConfigureLibrary(int64_t{config_.retain_seconds} * 1000);
  if (!persist::ResolvePools(config_, &pools_, &error)) {
    DQ_LOG(kError, "%s", error.c_str());
    return 1;
  }
  if (!LoadUpstreamTls(config_, &error)) {
    DQ_LOG(kError, "refusing to start: %s", error.c_str());
    return 1;
  }
  for (const persist::ResolvedPool& pool : pools_) {
    pool.stats->record_latency = metrics_enabled();
    std::string warning;
    if (!persist::CheckPool(pool, &warning, &error)) {
      DQ_LOG(kError, "refusing to start: %s", error.c_str());
      return 1;
    }
    if (!warning.empty()) DQ_LOG(kWarning, "%s", warning.c_str());
  }
  // Signals are taken synchronously by this thread (sigwait); the loop threads inherit the mask
  // and never see them. SIGPIPE is ignored for good measure (sends use MSG_NOSIGNAL).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  // SIGHUP (systemd's reload, a closed terminal, logrotate) reloads what can be reloaded; its
  // default action would end the process without a word.
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);

  for (int i = 0; i < threads_; ++i) loops_.push_back(std::make_unique<EventLoop>(*this, i));

  // Each ring is created on its own thread (SINGLE_ISSUER); Init results come back in order.
  std::vector<std::thread> threads;
  LoopStartup startup(threads_);
  for (int i = 0; i < threads_; ++i) {
    threads.emplace_back([&, i] {
      std::string error;
      const bool ok = loops_[i]->Init(&error);
      startup.Report(i, ok, std::move(error));
      // No loop serves before every loop is ready: a loop that ran at once would answer
      // clients (a supervisor's health probe) of a process about to exit because another
      // loop could not start (its metrics address taken, say).
      if (ok && startup.WaitAll().empty()) loops_[i]->Run();
    });
  }
  const std::string startup_error = startup.WaitAll();
  const bool failed = !startup_error.empty();
  if (failed) DQ_LOG(kError, "%s", startup_error.c_str());
  if (!failed) {
    DQ_LOG(kInfo, "serving RESP on %s:%u with %d thread%s (io_uring)", config_.listen_host.c_str(),
           config_.listen_port, threads_, threads_ == 1 ? "" : "s");
    if (config_.tls_listen_port != 0) {
      DQ_LOG(kInfo, "serving RESP over TLS on %s:%u", config_.tls_listen_host.c_str(),
             config_.tls_listen_port);
    }
    int sig = 0;
    while (sigwait(&set, &sig) == 0 && sig == SIGHUP) Reload();
    DQ_LOG(kInfo, "%s received, flushing replies and stopping",
           sig == SIGINT ? "SIGINT" : "SIGTERM");
  }
  if (!failed) {
    for (int i = 0; i < threads_; ++i) loops_[i]->Stop();
  }
  for (auto& t : threads) t.join();
  if (!failed) DQ_LOG(kInfo, "stopped");
  return failed ? 1 : 0;
}

}  // namespace deferq::net
