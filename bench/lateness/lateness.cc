// lateness: how late deferq delivers delayed jobs to consumers that are waiting for them.
//
//   lateness --port P [--port P2 ...] [--jobs N] [--delay-min MS] [--delay-max MS] [--pat]
//            [--publishers T] [--batch B] [--consumers C] [--count K] [--grace-s S]
//            [--queue NAME] [--queues Q] [--host H] [--label TEXT] [--seed X] [--early-ms E]
//            [--dump FILE]
//
// What is measured
// ----------------
// Consumer threads (C per instance, each with its own connection) sit blocked in
// `CONSUME q TIMEOUT 1 COUNT K` before anything is published. With --queues Q (> 1) the jobs are
// spread over Q queues NAME_0 .. NAME_{Q-1} (job k in queue k mod Q) and every consumer names all
// of them, `CONSUME NAME_0 ... NAME_{Q-1} TIMEOUT 1 COUNT K` (a consumer of many queues). Publisher
// threads then publish N jobs
// (`PUBLISH q payload PDELAY d`, d uniform in [delay-min, delay-max) ms), job i through instance
// i mod (number of instances), pipelined B commands at a time, so the whole publish phase is over
// long before the first job falls due (the tool prints the margin and warns when there is none).
// With --pat the jobs are published with `PAT base+d` instead, base being the time publishing
// started: the due times then cover exactly [base+delay-min, base+delay-max) however long the
// publishing takes, which is how a fixed rate of jobs falling due per second is produced.
//
// A generated job id starts with the job's due time: its first 10 Crockford base32 characters are
// the 48-bit unix-ms timestamp. So the due time of a delivered job is read from its id, and
//
//     lateness = (CLOCK_REALTIME when the CONSUME reply carrying the job was read) - due ms.
//
// Publisher, consumer and server run on the same machine and read the same clock, so there is no
// skew to correct. The publishers check every returned id against the due time they asked for
// (exactly equal with PAT; within the send/reply window with PDELAY) and count disagreements as
// due_mismatch, which must be 0 for the numbers to mean anything.
//
// What the number includes: deferq noticing the due time (timing wheel, or the periodic sweep when
// the wheel is off), moving the job to ready in Redis, waking a blocked consumer, leasing the job
// in Redis, writing the reply; loopback; and the consumer side: the thread must be scheduled and
// hiredis must read and parse the reply (the timestamp is taken right after redisGetReply returns,
// once per reply, before any bookkeeping). It also includes the consumers' own gaps: after each
// reply a consumer sends `ACK q <ids of that reply>` pipelined with its next CONSUME, so for a
// round trip it is not waiting, and a job falling due while every consumer of its instance is busy
// waits for the next CONSUME. Several consumers per instance keep that gap small, and COUNT K lets
// one reply drain a backlog, but at high rates it does not vanish: the figures are an upper bound
// of what deferq alone adds, and what a real consumer on this machine would see. On a small machine
// the consumer threads also compete for the CPUs with deferq and redis-server.
//
// Early deliveries (lateness < -E ms, default E = 0.5: the clock is read in ns, due times are whole
// ms) must never happen; they are counted separately. Duplicated deliveries (at-least-once) are
// counted and recorded once. The run stops when all N distinct jobs arrived or grace-s seconds
// after the last job's due time; jobs not received by then are reported as missing.
//
// The machine is shared and small, so the tool also watches it: a probe thread sleeps 1 ms at a
// time while jobs fall due and records how much later than asked it woke up (the scheduling delay
// any thread of deferq, redis-server or the consumers can suffer at that moment); its p99 and max
// are reported as probe_p99/probe_max. A lateness tail that matches a probe stall is the machine,
// not deferq. The tool's own CPU time is reported as cpu_ms (run.sh uses it to account the load).
//
// Output: a human-readable summary, then one line `RESULT key=value ...` for scripts (run.sh).
// --dump FILE also writes one line per distinct job received, "due_ms lateness_ms", for analysis
// (e.g. lateness against the position of the due time within its second).
// Exit status: 0 when the measurement ran (whatever it found), 2 on usage or connection errors.

#include <hiredis/hiredis.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

namespace {

[[noreturn]] void Fail(const char* fmt, const std::string& detail = {}) {
  std::fprintf(stderr, "lateness: ");
  std::fprintf(stderr, fmt, detail.c_str());
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  std::_Exit(2);  // other threads may be blocked in the server: do not run destructors
}

int64_t WallNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

constexpr std::string_view kCrockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

// The due time (unix ms) a generated id starts with, or -1 when `id` is not a generated id.
int64_t DueMsOfId(std::string_view id) {
  if (id.size() != 26) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < 10; ++i) {
    const size_t digit = kCrockford.find(id[i]);
    if (digit == std::string_view::npos) return -1;
    v = (v << 5) | digit;
  }
  if (v >> 48) return -1;
  return static_cast<int64_t>(v);
}

struct Options {
  std::string host = "127.0.0.1";
  std::vector<int> ports;
  int64_t jobs = 5000;
  int64_t delay_min = 1000;
  int64_t delay_max = 5000;
  bool pat = false;
  int publishers = 2;
  int batch = 500;
  int consumers = 4;  // per instance
  int count = 100;
  int grace_s = 10;
  double early_ms = 0.5;
  uint64_t seed = 1;
  std::string queue;
  int queues = 1;  // --queues: the jobs spread over this many queues, each consumer names all
  std::string label = "-";
  std::string dump;
};

void Usage() {
  std::fprintf(
      stderr,
      "usage: lateness --port P [--port P2 ...] [--jobs N] [--delay-min MS] [--delay-max MS]\n"
      "                [--pat] [--publishers T] [--batch B] [--consumers C] [--count K]\n"
      "                [--grace-s S] [--queue NAME] [--queues Q] [--host H] [--label TEXT]\n"
      "                [--seed X]\n"
      "                [--early-ms E] [--dump FILE]\n");
  std::exit(2);
}

int64_t ParseInt(const char* s, int64_t lo, int64_t hi, const char* what) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) {
    Fail("bad value for %s", std::string(what) + ": " + s);
  }
  return v;
}

Options ParseOptions(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) Usage();
      return argv[++i];
    };
    if (a == "--port") {
      o.ports.push_back(static_cast<int>(ParseInt(next(), 1, 65535, "--port")));
    } else if (a == "--host") {
      o.host = next();
    } else if (a == "--jobs") {
      o.jobs = ParseInt(next(), 1, 100'000'000, "--jobs");
    } else if (a == "--delay-min") {
      o.delay_min = ParseInt(next(), 0, 86'400'000, "--delay-min");
    } else if (a == "--delay-max") {
      o.delay_max = ParseInt(next(), 1, 86'400'000, "--delay-max");
    } else if (a == "--pat") {
      o.pat = true;
    } else if (a == "--publishers") {
      o.publishers = static_cast<int>(ParseInt(next(), 1, 64, "--publishers"));
    } else if (a == "--batch") {
      o.batch = static_cast<int>(ParseInt(next(), 1, 100'000, "--batch"));
    } else if (a == "--consumers") {
      o.consumers = static_cast<int>(ParseInt(next(), 1, 256, "--consumers"));
    } else if (a == "--count") {
      o.count = static_cast<int>(ParseInt(next(), 1, 1000, "--count"));
    } else if (a == "--grace-s") {
      o.grace_s = static_cast<int>(ParseInt(next(), 1, 3600, "--grace-s"));
    } else if (a == "--early-ms") {
      o.early_ms = std::atof(next());
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(ParseInt(next(), 0, INT64_MAX, "--seed"));
    } else if (a == "--queue") {
      o.queue = next();
    } else if (a == "--queues") {
      o.queues = static_cast<int>(ParseInt(next(), 1, 100'000, "--queues"));
    } else if (a == "--label") {
      o.label = next();
    } else if (a == "--dump") {
      o.dump = next();
    } else {
      Usage();
    }
  }
  if (o.ports.empty() || o.delay_max <= o.delay_min) Usage();
  if (o.queue.empty()) {
    o.queue = "lateness-" + std::to_string(getpid()) + "-" + std::to_string(WallNs() / 1'000'000);
  }
  return o;
}

// The queue of job k.
std::string QueueOf(const Options& o, int64_t k) {
  return o.queues == 1 ? o.queue : o.queue + "_" + std::to_string(k % o.queues);
}

// ---- hiredis helpers -------------------------------------------------------------------------

struct ContextDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using Context = std::unique_ptr<redisContext, ContextDeleter>;

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

Context Connect(const Options& o, int port) {
  const timeval connect_timeout{2, 0};
  Context c(redisConnectWithTimeout(o.host.c_str(), port, connect_timeout));
  if (!c) Fail("cannot allocate a connection%s");
  if (c->err) Fail("connect: %s", o.host + ":" + std::to_string(port) + ": " + c->errstr);
  // CONSUME blocks at most 1 s; anything much longer than that is a hung server.
  const timeval io_timeout{15, 0};
  redisSetTimeout(c.get(), io_timeout);
  return c;
}

class Command {
 public:
  Command& Add(std::string_view s) {
    args_.emplace_back(s);
    return *this;
  }
  void AppendTo(redisContext* c) {
    ptrs_.clear();
    lens_.clear();
    for (const std::string& a : args_) {
      ptrs_.push_back(a.data());
      lens_.push_back(a.size());
    }
    if (redisAppendCommandArgv(c, static_cast<int>(args_.size()), ptrs_.data(), lens_.data()) !=
        REDIS_OK) {
      Fail("append: %s", c->errstr);
    }
    args_.clear();
  }

 private:
  std::vector<std::string> args_;
  std::vector<const char*> ptrs_;
  std::vector<size_t> lens_;
};

Reply GetReply(redisContext* c) {
  void* r = nullptr;
  if (redisGetReply(c, &r) != REDIS_OK || r == nullptr) Fail("read: %s", c->errstr);
  Reply reply(static_cast<redisReply*>(r));
  if (reply->type == REDIS_REPLY_ERROR)
    Fail("server error: %s", std::string(reply->str, reply->len));
  return reply;
}

// ---- Publishing ------------------------------------------------------------------------------

struct PublishResult {
  std::vector<std::string> ids;
  int64_t due_mismatch = 0;
  int64_t min_due = INT64_MAX;
  int64_t max_due = INT64_MIN;
};

struct Pending {
  int64_t delay;
  int64_t want_due;  // PAT: the exact due time; PDELAY: clock before sending + delay
};

void Publish(const Options& o, int thread, int64_t begin, int64_t end, int64_t base_ms,
             PublishResult* out) {
  const size_t n_inst = o.ports.size();
  std::vector<Context> conns;
  for (int port : o.ports) conns.push_back(Connect(o, port));
  std::mt19937_64 rng(o.seed * 1'000'003 + static_cast<uint64_t>(thread));
  std::uniform_int_distribution<int64_t> delay_dist(o.delay_min, o.delay_max - 1);
  std::vector<std::vector<Pending>> pending(n_inst);
  Command cmd;
  out->ids.reserve(static_cast<size_t>(end - begin));

  for (int64_t b = begin; b < end; b += o.batch) {
    const int64_t e = std::min(end, b + o.batch);
    const int64_t sent_ms = WallNs() / 1'000'000;  // floor: the server reads its clock later
    for (int64_t k = b; k < e; ++k) {
      const size_t inst = static_cast<size_t>(k) % n_inst;
      const int64_t d = delay_dist(rng);
      cmd.Add("PUBLISH").Add(QueueOf(o, k)).Add("job-" + std::to_string(k));
      if (o.pat) {
        cmd.Add("PAT").Add(std::to_string(base_ms + d));
        pending[inst].push_back({d, base_ms + d});
      } else {
        cmd.Add("PDELAY").Add(std::to_string(d));
        pending[inst].push_back({d, sent_ms + d});
      }
      cmd.AppendTo(conns[inst].get());
    }
    for (size_t inst = 0; inst < n_inst; ++inst) {
      for (const Pending& p : pending[inst]) {
        Reply r = GetReply(conns[inst].get());
        if (r->type != REDIS_REPLY_STRING)
          Fail("PUBLISH replied with type %s", std::to_string(r->type));
        std::string id(r->str, r->len);
        const int64_t due = DueMsOfId(id);
        if (due < 0) Fail("PUBLISH returned an id that is not a generated id: %s", id);
        // PDELAY: the server read its clock between our send and this reply.
        const int64_t latest_ms = (WallNs() + 999'999) / 1'000'000 + p.delay;
        const bool ok = o.pat ? due == p.want_due : (due >= p.want_due && due <= latest_ms);
        if (!ok) ++out->due_mismatch;
        out->min_due = std::min(out->min_due, due);
        out->max_due = std::max(out->max_due, due);
        out->ids.push_back(std::move(id));
      }
      pending[inst].clear();
    }
  }
}

// ---- Consuming -------------------------------------------------------------------------------

struct Shared {
  std::atomic<bool> done{false};
  std::atomic<int64_t> deadline_ns{INT64_MAX};
  std::atomic<int> connected{0};
  std::mutex mu;
  std::unordered_set<std::string> seen;  // guarded by mu
  int64_t unique = 0;                    // guarded by mu
  int64_t duplicates = 0;                // guarded by mu
};

struct ConsumeResult {
  std::vector<int64_t> late_ns;  // one per distinct job this consumer received first
  std::vector<int64_t> due_ms;   // with --dump: the due time of each of them
  int64_t replies = 0;
  int64_t jobs = 0;
  int64_t acked = 0;
};

// One ACK per queue of the jobs taken (queue name, id); returns how many ACKs were sent.
size_t AppendAcks(redisContext* c, const std::vector<std::pair<std::string, std::string>>& jobs,
                  Command* cmd) {
  std::vector<std::pair<std::string, std::string>> sorted = jobs;
  std::sort(sorted.begin(), sorted.end());
  size_t acks = 0;
  for (size_t i = 0; i < sorted.size();) {
    cmd->Add("ACK").Add(sorted[i].first);
    size_t j = i;
    for (; j < sorted.size() && sorted[j].first == sorted[i].first; ++j) cmd->Add(sorted[j].second);
    cmd->AppendTo(c);
    ++acks;
    i = j;
  }
  return acks;
}

void Consume(const Options& o, int port, Shared* sh, ConsumeResult* out) {
  Context conn = Connect(o, port);
  redisContext* c = conn.get();
  sh->connected.fetch_add(1);
  const std::string count = std::to_string(o.count);
  std::vector<std::pair<std::string, std::string>> to_ack;  // queue, id
  std::vector<std::pair<std::string, int64_t>> got;         // id, lateness of the current reply
  std::vector<std::string> queue_names;
  for (int q = 0; q < o.queues; ++q) queue_names.push_back(QueueOf(o, q));
  Command cmd;

  while (!sh->done.load(std::memory_order_acquire) && WallNs() < sh->deadline_ns.load()) {
    // The ACKs for the previous reply travel with the next CONSUME: one write, no extra wait.
    const size_t acks = to_ack.empty() ? 0 : AppendAcks(c, to_ack, &cmd);
    cmd.Add("CONSUME");
    for (const std::string& q : queue_names) cmd.Add(q);
    cmd.Add("TIMEOUT").Add("1").Add("COUNT").Add(count);
    cmd.AppendTo(c);
    for (size_t a = 0; a < acks; ++a) {
      Reply r = GetReply(c);
      if (r->type != REDIS_REPLY_INTEGER) Fail("ACK replied with type %s", std::to_string(r->type));
      out->acked += r->integer;
    }
    to_ack.clear();
    Reply r = GetReply(c);
    const int64_t now_ns = WallNs();  // the moment the jobs reached the consumer
    if (r->type == REDIS_REPLY_NIL) continue;
    if (r->type != REDIS_REPLY_ARRAY) Fail("CONSUME replied with type %s", std::to_string(r->type));
    ++out->replies;
    got.clear();
    for (size_t i = 0; i < r->elements; ++i) {
      const redisReply* job = r->element[i];
      if (job->type != REDIS_REPLY_ARRAY || job->elements < 2 ||
          job->element[1]->type != REDIS_REPLY_STRING) {
        Fail("CONSUME returned a malformed job%s");
      }
      std::string id(job->element[1]->str, job->element[1]->len);
      const int64_t due = DueMsOfId(id);
      if (due < 0) Fail("CONSUME returned an id that is not a generated id: %s", id);
      to_ack.emplace_back(std::string(job->element[0]->str, job->element[0]->len), id);
      got.emplace_back(std::move(id), now_ns - due * 1'000'000);
    }
    out->jobs += static_cast<int64_t>(got.size());
    {
      std::lock_guard<std::mutex> lock(sh->mu);
      for (auto& [id, late] : got) {
        if (sh->seen.insert(id).second) {
          ++sh->unique;
          out->late_ns.push_back(late);
          if (!o.dump.empty()) out->due_ms.push_back(DueMsOfId(id));
        } else {
          ++sh->duplicates;
        }
      }
      if (sh->unique >= o.jobs) sh->done.store(true, std::memory_order_release);
    }
  }
  if (!to_ack.empty()) {
    const size_t acks = AppendAcks(c, to_ack, &cmd);
    for (size_t a = 0; a < acks; ++a) {
      Reply r = GetReply(c);
      if (r->type == REDIS_REPLY_INTEGER) out->acked += r->integer;
    }
  }
}

// ---- Scheduling probe --------------------------------------------------------------------------

// Sleeps 1 ms at a time until *stop and records each wake-up's delay beyond the 1 ms asked for.
void Probe(const std::atomic<bool>* stop, std::vector<int64_t>* over_ns) {
  const timespec one_ms{0, 1'000'000};
  while (!stop->load(std::memory_order_relaxed)) {
    const int64_t t0 = MonoNs();
    nanosleep(&one_ms, nullptr);
    over_ns->push_back(MonoNs() - t0 - 1'000'000);
  }
}

// ---- Report ----------------------------------------------------------------------------------

// Nearest-rank percentile of sorted values, in ms.
double Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return NAN;
  size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return static_cast<double>(sorted[rank - 1]) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseOptions(argc, argv);
  const size_t n_inst = o.ports.size();

  std::printf("lateness: %s: queue %s, %zu instance(s) (ports", o.label.c_str(), o.queue.c_str(),
              n_inst);
  for (int p : o.ports) std::printf(" %d", p);
  std::printf("), %d consumers/instance (COUNT %d), %d publishers (batch %d)\n", o.consumers,
              o.count, o.publishers, o.batch);
  std::printf("  %" PRId64 " jobs, due %s + [%" PRId64 ", %" PRId64 ") ms\n", o.jobs,
              o.pat ? "publish start (PAT)" : "publish time (PDELAY)", o.delay_min, o.delay_max);

  // Consumers first: every one is connected and blocked before the first job can fall due.
  Shared sh;
  std::vector<ConsumeResult> cres(n_inst * static_cast<size_t>(o.consumers));
  std::vector<std::thread> consumers;
  for (size_t i = 0; i < cres.size(); ++i) {
    consumers.emplace_back(Consume, std::cref(o), o.ports[i % n_inst], &sh, &cres[i]);
  }
  while (sh.connected.load() < static_cast<int>(cres.size())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let their CONSUMEs block

  const int64_t pub_start_ns = WallNs();
  const int64_t base_ms = pub_start_ns / 1'000'000;
  std::vector<PublishResult> pres(static_cast<size_t>(o.publishers));
  {
    std::vector<std::thread> publishers;
    for (int t = 0; t < o.publishers; ++t) {
      const int64_t begin = o.jobs * t / o.publishers;
      const int64_t end = o.jobs * (t + 1) / o.publishers;
      publishers.emplace_back(Publish, std::cref(o), t, begin, end, base_ms,
                              &pres[static_cast<size_t>(t)]);
    }
    for (std::thread& t : publishers) t.join();
  }
  const int64_t pub_end_ns = WallNs();
  int64_t min_due = INT64_MAX;
  int64_t max_due = INT64_MIN;
  int64_t due_mismatch = 0;
  for (const PublishResult& p : pres) {
    min_due = std::min(min_due, p.min_due);
    max_due = std::max(max_due, p.max_due);
    due_mismatch += p.due_mismatch;
  }
  const double publish_ms = static_cast<double>(pub_end_ns - pub_start_ns) / 1e6;
  const double margin_ms = static_cast<double>(min_due * 1'000'000 - pub_end_ns) / 1e6;
  const double window_s = static_cast<double>(max_due - min_due + 1) / 1e3;
  std::printf(
      "  published in %.1f ms (%.0f jobs/s); first job due %.1f ms after publishing ended%s\n",
      publish_ms, static_cast<double>(o.jobs) / (publish_ms / 1e3), margin_ms,
      margin_ms <= 0 ? "  WARNING: publishing overlapped the due window" : "");
  std::printf("  due window %.3f s: %.0f jobs falling due per second; due_mismatch %" PRId64 "\n",
              window_s, static_cast<double>(o.jobs) / window_s, due_mismatch);

  sh.deadline_ns.store(max_due * 1'000'000 + static_cast<int64_t>(o.grace_s) * 1'000'000'000);
  std::atomic<bool> probe_stop{false};
  std::vector<int64_t> probe_ns;
  probe_ns.reserve(static_cast<size_t>(max_due - min_due + 2000) * 2);
  std::thread probe(Probe, &probe_stop, &probe_ns);
  for (std::thread& t : consumers) t.join();
  probe_stop.store(true);
  probe.join();
  std::sort(probe_ns.begin(), probe_ns.end());
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double cpu_ms = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1e3 +
                        static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e3;

  if (!o.dump.empty()) {
    FILE* f = std::fopen(o.dump.c_str(), "w");
    if (!f) Fail("cannot write %s", o.dump);
    for (const ConsumeResult& r : cres) {
      for (size_t i = 0; i < r.late_ns.size(); ++i) {
        std::fprintf(f, "%" PRId64 " %.3f\n", r.due_ms[i], static_cast<double>(r.late_ns[i]) / 1e6);
      }
    }
    std::fclose(f);
  }

  std::vector<int64_t> late;
  int64_t replies = 0;
  int64_t delivered = 0;
  int64_t acked = 0;
  for (ConsumeResult& r : cres) {
    late.insert(late.end(), r.late_ns.begin(), r.late_ns.end());
    replies += r.replies;
    delivered += r.jobs;
    acked += r.acked;
  }
  std::sort(late.begin(), late.end());
  const int64_t early_ns = static_cast<int64_t>(o.early_ms * 1e6);
  const int64_t early =
      std::count_if(late.begin(), late.end(), [&](int64_t v) { return v < -early_ns; });

  // Missing: published ids never received (also catches ids received that we never published).
  int64_t missing = 0;
  int64_t unknown = static_cast<int64_t>(sh.seen.size());
  std::vector<std::string> missing_examples;
  for (const PublishResult& p : pres) {
    for (const std::string& id : p.ids) {
      if (sh.seen.count(id)) {
        --unknown;
      } else {
        ++missing;
        if (missing_examples.size() < 5) missing_examples.push_back(id);
      }
    }
  }

  const double p50 = Percentile(late, 0.50);
  const double p90 = Percentile(late, 0.90);
  const double p99 = Percentile(late, 0.99);
  const double mx = late.empty() ? NAN : static_cast<double>(late.back()) / 1e6;
  const double mn = late.empty() ? NAN : static_cast<double>(late.front()) / 1e6;
  std::printf("  received %zu distinct jobs (%" PRId64 " duplicate deliveries, %" PRId64
              " not ours) in %" PRId64 " replies (%.1f jobs/reply); acked %" PRId64
              "; missing %" PRId64 "\n",
              late.size(), sh.duplicates, unknown, replies,
              replies ? static_cast<double>(delivered) / static_cast<double>(replies) : 0.0, acked,
              missing);
  for (const std::string& id : missing_examples) {
    std::printf("    missing: %s (due %" PRId64 ")\n", id.c_str(), DueMsOfId(id));
  }
  std::printf(
      "  lateness ms: min %.1f  p50 %.1f  p90 %.1f  p99 %.1f  max %.1f;  early (< -%.1f ms): "
      "%" PRId64 "\n",
      mn, p50, p90, p99, mx, o.early_ms, early);
  const double probe_p99 = Percentile(probe_ns, 0.99);
  const double probe_max = probe_ns.empty() ? NAN : static_cast<double>(probe_ns.back()) / 1e6;
  std::printf(
      "  machine: 1 ms sleeps woke up late by p99 %.1f ms, max %.1f ms (%zu samples); tool CPU "
      "%.0f ms\n",
      probe_p99, probe_max, probe_ns.size(), cpu_ms);
  std::printf("RESULT label=%s n=%" PRId64 " received=%zu missing=%" PRId64 " duplicates=%" PRId64
              " early=%" PRId64
              " min=%.1f p50=%.1f p90=%.1f p99=%.1f max=%.1f publish_ms=%.1f margin_ms=%.1f"
              " rate=%.0f due_mismatch=%" PRId64 " replies=%" PRId64
              " probe_p99=%.1f probe_max=%.1f cpu_ms=%.0f\n",
              o.label.c_str(), o.jobs, late.size(), missing, sh.duplicates, early, mn, p50, p90,
              p99, mx, publish_ms, margin_ms, static_cast<double>(o.jobs) / window_s, due_mismatch,
              replies, probe_p99, probe_max, cpu_ms);
  std::fflush(stdout);
  return 0;
}
