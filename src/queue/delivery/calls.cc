#include "queue/delivery/calls.h"

#include <algorithm>

#include "persist/pool.h"
#include "queue/context/loop.h"
#include "queue/context/server_context.h"
#include "queue/model/job_codec.h"
#include "queue/model/job_id.h"

namespace deferq::queue {

namespace {

uint64_t ReadLE(std::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(s[at + static_cast<size_t>(i)]);
  }
  return v;
}

// An error reply's text holds no line break: a reason's are spaces.
std::string OneLine(std::string_view s) {
  std::string out(s);
  std::replace_if(
      out.begin(), out.end(), [](char c) { return c == '\r' || c == '\n'; }, ' ');
  return out;
}

// Without the channel, a parked call reads its job this often.
constexpr int64_t kReadWithoutChannelMs = 1000;

}  // namespace

std::optional<DoneNews> ParseDoneNews(std::string_view news) {
  if (!news.starts_with(kDoneNews)) return std::nullopt;
  news.remove_prefix(kDoneNews.size());
  const size_t space = news.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  DoneNews d;
  d.tag.assign(news.substr(0, space));
  news.remove_prefix(space + 1);
  if (news.size() < 2) return std::nullopt;
  const size_t n = (static_cast<unsigned char>(news[0]) << 8) | static_cast<unsigned char>(news[1]);
  // K, the outcome byte, u16 attempt, u48 when.
  if (news.size() < 2 + n + 1 + 2 + 6) return std::nullopt;
  d.key.assign(news.substr(2, n));
  d.outcome = news[2 + n];
  d.attempt = static_cast<int64_t>(ReadLE(news, 2 + n + 1, 2));
  d.text.assign(news.substr(2 + n + 1 + 2 + 6));
  return d;
}

std::string CallKey(std::string_view tag, std::string_view key) {
  std::string k;
  k.reserve(tag.size() + 1 + key.size());
  k.append(tag).append(" ").append(key);
  return k;
}

void CallDirectory::Add(const std::string& call_key, int thread) {
  base::MutexLock lock(&mu_);
  threads_[call_key].push_back(thread);
  parked_.fetch_add(1, std::memory_order_relaxed);
}

void CallDirectory::Remove(const std::string& call_key, int thread) {
  base::MutexLock lock(&mu_);
  auto it = threads_.find(call_key);
  if (it == threads_.end()) return;
  std::vector<int>& v = it->second;
  if (auto t = std::find(v.begin(), v.end(), thread); t != v.end()) {
    v.erase(t);
    parked_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (v.empty()) threads_.erase(it);
}

std::vector<int> CallDirectory::Threads(const std::string& call_key) const {
  base::MutexLock lock(&mu_);
  auto it = threads_.find(call_key);
  if (it == threads_.end()) return {};
  std::vector<int> out = it->second;
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void Calls::Park(const std::shared_ptr<Call>& call) {
  call->seq = next_seq_++;
  const std::string key = CallKey(call->q.tag(), call->key);
  by_seq_[call->seq] = call;
  by_job_.emplace(key, call);
  by_client_.emplace(call->ticket.client_id, call);
  if (call->deadline_ms > 0) deadlines_[{call->deadline_ms, call->seq}] = call;
  call->next_read_ms = loop_.now_ms() + kReadWithoutChannelMs;
  directory_.Add(key, loop_.thread_index());
}

void Calls::Forget(const std::shared_ptr<Call>& call) {
  call->done = true;
  if (by_seq_.erase(call->seq) == 0) return;
  const std::string key = CallKey(call->q.tag(), call->key);
  for (auto [it, end] = by_job_.equal_range(key); it != end; ++it) {
    if (it->second == call) {
      by_job_.erase(it);
      break;
    }
  }
  for (auto [it, end] = by_client_.equal_range(call->ticket.client_id); it != end; ++it) {
    if (it->second == call) {
      by_client_.erase(it);
      break;
    }
  }
  deadlines_.erase({call->deadline_ms, call->seq});
  directory_.Remove(key, loop_.thread_index());
}

void Calls::Fail(const std::shared_ptr<Call>& call, std::string_view error) {
  if (call->done) return;
  Forget(call);
  OwedReply{call->port, call->ticket}.Error(error);
}

void Calls::Answer(const std::shared_ptr<Call>& call, char outcome, std::string_view text,
                   int64_t attempt) {
  if (call->done) return;
  Forget(call);
  const OwedReply owed{call->port, call->ticket};
  const std::string& id = call->id_text;
  switch (outcome) {
    case 'f':
      return static_cast<void>(owed.Write([text](proto::ReplyWriter& w) { w.Bulk(text); }));
    case 'd':
      return owed.Error("DEAD job " + id + " died after attempt " + std::to_string(attempt) + ": " +
                        OneLine(text));
    case 'x':
      return owed.Error("EXPIRED job " + id + ": its ttl passed before it finished");
    case 'c':
      return owed.Error("CANCELLED job " + id + " was cancelled");
    default:
      return owed.Error(kUnexpectedReply);
  }
}

void Calls::Read(const std::shared_ptr<Call>& call) {
  if (call->done || call->read_in_flight) return;
  persist::PoolClient* pool = loop_.PoolFor(call->q.ns);
  if (pool == nullptr) return Fail(call, "ERR no pool configured for this namespace");
  call->read_in_flight = true;
  const std::string prefix = call->q.prefix();
  const std::string now = std::to_string(loop_.wall_ms());
  const std::string sec = DerivableSecond(call->key);
  const std::string_view keys[] = {prefix};
  const std::string_view args[] = {now, call->key, sec};
  pool->Eval(persist::Script::kAwait, keys, args, call->ticket.client_id,
             [this, call](const persist::UpstreamResult& r) {
               call->read_in_flight = false;
               if (call->done) return;
               // A failed read leaves the call parked: news, or the next re-read, answers it.
               if (r.view() == nullptr) return;
               ReadAnswered(call, r.view());
             });
}

void Calls::ReadAnswered(const std::shared_ptr<Call>& call, persist::ReplyView r) {
  if (r.is_nil()) {
    // No such job, or it finished with nothing kept: nothing will come.
    Forget(call);
    OwedReply{call->port, call->ticket}.Write([](proto::ReplyWriter& w) { w.Null(); });
    return;
  }
  if (r.is_error()) return Fail(call, r.str());
  if (!r.is_array() || r.size() == 0 || !r[0].is_string()) {
    return Fail(call, kUnexpectedReply);
  }
  const std::string_view what(r[0].str());
  if (what == "live") return;  // marked: its end will be announced
  if (what == "recurring") {
    return Fail(call, "ERR a recurring job never finishes (EVERY, CRON): nothing to wait for");
  }
  if (r.size() < 4) return Fail(call, kUnexpectedReply);
  std::string_view text;
  if (r[1].is_string()) text = {r[1].str()};
  int64_t attempt = 0;
  r[2].Int(&attempt);
  const char outcome = what == "finished"    ? 'f'
                       : what == "dead"      ? 'd'
                       : what == "expired"   ? 'x'
                       : what == "cancelled" ? 'c'
                                             : 0;
  Answer(call, outcome, text, attempt);
}

void Calls::OnNews(std::string_view news) {
  std::optional<DoneNews> d = ParseDoneNews(news);
  if (!d) return;
  std::vector<std::shared_ptr<Call>> calls;
  for (auto [it, end] = by_job_.equal_range(CallKey(d->tag, d->key)); it != end; ++it) {
    calls.push_back(it->second);
  }
  for (const auto& call : calls) Answer(call, d->outcome, d->text, d->attempt);
}

void Calls::Route(std::string_view news) {
  std::optional<DoneNews> d = ParseDoneNews(news);
  if (!d) return;
  for (int thread : directory_.Threads(CallKey(d->tag, d->key))) {
    if (thread == loop_.thread_index()) {
      OnNews(news);
    } else {
      loop_.peers().Post(thread, [news = std::string(news)](Loop& l) { l.calls().OnNews(news); });
    }
  }
}

void Calls::OnClientGone(uint64_t client_id) {
  std::vector<std::shared_ptr<Call>> gone;
  for (auto [it, end] = by_client_.equal_range(client_id); it != end; ++it) {
    gone.push_back(it->second);
  }
  for (const auto& call : gone) Forget(call);
}

void Calls::Tick() {
  const int64_t now = loop_.now_ms();
  std::vector<std::shared_ptr<Call>> due;
  for (auto it = deadlines_.begin(); it != deadlines_.end() && it->first.first <= now; ++it) {
    due.push_back(it->second);
  }
  for (const auto& call : due) {
    Fail(call, "TIMEOUT job " + call->id_text + " has not finished; it stays as it is (WAITJOB " +
                   call->q.queue + " " + call->id_text + " waits for it again)");
  }
  if (by_seq_.empty()) {
    epoch_seen_ = loop_.flags().subscribed_epoch();
    reread_wanted_ = false;
    return;
  }
  const bool channel = loop_.config().cross_instance_wake;
  const uint64_t epoch = loop_.flags().subscribed_epoch();
  const bool all = reread_wanted_ || epoch != epoch_seen_;
  epoch_seen_ = epoch;
  reread_wanted_ = false;
  if (!all && channel) return;
  std::vector<std::shared_ptr<Call>> read;
  for (const auto& [seq, call] : by_seq_) {
    if (all || call->next_read_ms <= now) read.push_back(call);
  }
  for (const auto& call : read) {
    call->next_read_ms = now + kReadWithoutChannelMs;
    Read(call);
  }
}

void Calls::ReleaseAll() {
  std::vector<std::shared_ptr<Call>> all;
  for (const auto& [seq, call] : by_seq_) all.push_back(call);
  for (const auto& call : all) {
    Fail(call, "TRYAGAIN deferq is stopping: job " + call->id_text +
                   " stays as it is (WAITJOB waits for it again)");
  }
}

}  // namespace deferq::queue
