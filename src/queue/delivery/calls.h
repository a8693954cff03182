// Requesters blocked until a job finishes: CALL (publish, then wait for the job's result) and
// WAITJOB (wait for a job by id). No queue per request and no polling: the job's record carries
// a mark (L_NOTIFY), and whatever call finishes it, on any instance, announces its outcome and
// result on the pool's channel (common/outcomes.lua retire), which every instance hears.
//
// API (in the manner of Redis's blocked.c):
//   Calls::Park(call)           a CALL whose publish is being sent: registered first, so news
//                               of its job cannot come before it is parked
//   Calls::Read(call)           reads where the call's job stands (await.lua, which also marks
//                               it): answered at once when it has finished, else parked
//   Calls::OnNews(news)         a "done ..." news of the channel, routed to this thread
//   Calls::OnClientGone(id)     a requester left: forgotten (nothing in Redis waits for it)
//   Calls::Tick()               deadlines (-TIMEOUT); after a resubscription or dropped hints,
//                               every parked call reads its job again (news may have been lost);
//                               without the channel (cross_instance_wake off) each reads it once
//                               a second
//   Calls::ReleaseAll()         server stop: every parked call is answered -TRYAGAIN
//   CallDirectory               instance-wide: which threads park calls for a job, so the thread
//                               that hears the channel routes each news to them only
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "persist/reply_view.h"
#include "queue/context/client_port.h"
#include "queue/model/queue_name.h"

namespace deferq::queue {

// News of a finished job on the pool's channel: "done ns/queue " .. u16 #K (big-endian) .. K ..
// outcome .. u16 attempt .. u48 when (little-endian) .. text (common/outcomes.lua retire).
inline constexpr std::string_view kDoneNews = "done ";

struct DoneNews {
  std::string tag;   // "ns/queue"
  std::string key;   // K
  char outcome = 0;  // 'f' finished, 'd' dead, 'x' expired, 'c' cancelled
  int64_t attempt = 0;
  std::string text;  // the result ('f') or why it died ('d')
};
// Parses a news; nullopt when it is not a well-formed done news.
std::optional<DoneNews> ParseDoneNews(std::string_view news);
// The routing key of a job's calls: tag, a space, K (a tag holds no space).
std::string CallKey(std::string_view tag, std::string_view key);

// A requester blocked in CALL or WAITJOB.
struct Call {
  ClientPort* port = nullptr;
  ReplyTicket ticket;
  QueueName q;              // the queue (the shard) that holds the job
  std::string key;          // K
  std::string id_text;      // the id as the client knows it (for -TIMEOUT)
  int64_t deadline_ms = 0;  // monotonic; 0 = no limit
  uint64_t seq = 0;
  bool done = false;
  bool read_in_flight = false;
  int64_t next_read_ms = 0;  // without the channel: its next read
};

class CallDirectory {
 public:
  void Add(const std::string& call_key, int thread);
  void Remove(const std::string& call_key, int thread);
  // The threads parking calls for `call_key` (each once).
  std::vector<int> Threads(const std::string& call_key) const;
  // Requesters parked in CALL or WAITJOB on every thread (INFO clients blocked_clients).
  int64_t parked() const { return parked_.load(std::memory_order_relaxed); }

 private:
  mutable base::Mutex mu_;
  std::unordered_map<std::string, std::vector<int>> threads_ DQ_GUARDED_BY(mu_);
  std::atomic<int64_t> parked_{0};
};

class Loop;

class Calls {
 public:
  Calls(Loop& loop, CallDirectory& directory) : loop_(loop), directory_(directory) {}

  void Park(const std::shared_ptr<Call>& call);
  void Read(const std::shared_ptr<Call>& call);
  // Answers `call` with an error (its publish failed) and forgets it.
  void Fail(const std::shared_ptr<Call>& call, std::string_view error);
  void OnNews(std::string_view news);
  // Thread 0: a news heard on the channel goes to the threads parking calls for its job.
  void Route(std::string_view news);
  void OnClientGone(uint64_t client_id);
  void OnHintsDropped() { reread_wanted_ = true; }
  void Tick();
  void ReleaseAll();
  size_t parked() const { return by_seq_.size(); }

 private:
  void Answer(const std::shared_ptr<Call>& call, char outcome, std::string_view text,
              int64_t attempt);
  void Forget(const std::shared_ptr<Call>& call);
  void ReadAnswered(const std::shared_ptr<Call>& call, persist::ReplyView r);

  Loop& loop_;
  CallDirectory& directory_;
  std::map<uint64_t, std::shared_ptr<Call>> by_seq_;
  std::unordered_multimap<std::string, std::shared_ptr<Call>> by_job_;
  std::unordered_multimap<uint64_t, std::shared_ptr<Call>> by_client_;
  std::map<std::pair<int64_t, uint64_t>, std::shared_ptr<Call>> deadlines_;
  uint64_t next_seq_ = 1;
  uint64_t epoch_seen_ = 0;
  bool reread_wanted_ = false;
};

}  // namespace deferq::queue
