// The RESP2 and RESP3 replies of every reply shape, checked against each other (docs/commands.md,
// connection commands): the writer's primitives, and every job-bearing reply the command handlers
// write (job_codec). A job is the same 7-element array in both protocols; JOB and QSTAT are maps in
// RESP3 and flat field/value arrays in RESP2; nulls are `_` in RESP3. Storage replies are real
// hiredis replies, read by hiredis's own reader from the RESP text Redis would send.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "proto/reply_writer.h"
#include "queue/model/job_codec.h"
#include "queue/model/job_id.h"

namespace deferq::queue {
namespace {

using proto::ReplyWriter;

// One decoded RESP value. Aggregates keep their elements in order; a map keeps key, value, key,
// value... so it lines up with the flat RESP2 array.
struct Value {
  char type = 0;      // the RESP marker: + - : $ * % ~ _ , # =
  bool null = false;  // $-1 or *-1
  std::string text;   // simple, error, bulk, verbatim (with its "txt:"), double, integer text
  std::vector<Value> items;
};

// Decodes one value from s at *pos; fails the test on malformed input.
Value Decode(const std::string& s, size_t* pos) {
  Value v;
  v.type = s.at(*pos);
  const size_t eol = s.find("\r\n", *pos);
  EXPECT_NE(eol, std::string::npos) << s;
  const std::string line = s.substr(*pos + 1, eol - *pos - 1);
  *pos = eol + 2;
  switch (v.type) {
    case '+':
    case '-':
    case ':':
    case ',':
    case '#':
      v.text = line;
      break;
    case '_':
      v.null = true;
      break;
    case '$':
    case '=': {
      const long n = std::stol(line);
      if (n < 0) {
        v.null = true;
        break;
      }
      v.text = s.substr(*pos, static_cast<size_t>(n));
      *pos += static_cast<size_t>(n) + 2;
      break;
    }
    case '*':
    case '~':
    case '%': {
      const long n = std::stol(line);
      if (n < 0) {
        v.null = true;
        break;
      }
      const long count = v.type == '%' ? 2 * n : n;
      for (long i = 0; i < count; ++i) v.items.push_back(Decode(s, pos));
      break;
    }
    default:
      ADD_FAILURE() << "unknown RESP marker '" << v.type << "' in " << s;
  }
  return v;
}

Value DecodeAll(const std::string& s) {
  size_t pos = 0;
  Value v = Decode(s, &pos);
  EXPECT_EQ(pos, s.size()) << "trailing bytes after one reply: " << s;
  return v;
}

// Whether a RESP3 value is what the same reply is in RESP2: maps become flat arrays, sets
// arrays, nulls $-1 or *-1, doubles and verbatim strings bulk strings, booleans integers;
// everything else is written identically.
::testing::AssertionResult Corresponds(const Value& r2, const Value& r3, const std::string& at) {
  auto fail = [&](const std::string& why) {
    return ::testing::AssertionFailure()
           << at << ": " << why << " (RESP2 '" << r2.type << "', RESP3 '" << r3.type << "')";
  };
  switch (r3.type) {
    case '_':
      if ((r2.type == '$' || r2.type == '*') && r2.null) return ::testing::AssertionSuccess();
      return fail("a RESP3 null must be a RESP2 null");
    case ',':
      if (r2.type == '$' && r2.text == r3.text) return ::testing::AssertionSuccess();
      return fail("a double must be the bulk string of the same text");
    case '#':
      if (r2.type == ':' && r2.text == (r3.text == "t" ? "1" : "0")) {
        return ::testing::AssertionSuccess();
      }
      return fail("a boolean must be the integer 1 or 0");
    case '=':
      if (r2.type == '$' && "txt:" + r2.text == r3.text) return ::testing::AssertionSuccess();
      return fail("a verbatim string must be the bulk string of its text");
    case '%':
    case '~':
    case '*':
      if (r2.type != '*' || r2.null != r3.null) return fail("an aggregate must be an array");
      if (r2.items.size() != r3.items.size()) return fail("element counts differ");
      for (size_t i = 0; i < r2.items.size(); ++i) {
        auto ok = Corresponds(r2.items[i], r3.items[i], at + "[" + std::to_string(i) + "]");
        if (!ok) return ok;
      }
      return ::testing::AssertionSuccess();
    default:
      if (r2.type == r3.type && r2.null == r3.null && r2.text == r3.text) {
        return ::testing::AssertionSuccess();
      }
      return fail("must be written the same way in both protocols");
  }
}

struct Written {
  std::string resp2, resp3;
};

Written WriteBoth(const std::function<void(ReplyWriter&)>& write) {
  Written out;
  ReplyWriter w2(&out.resp2, 2);
  write(w2);
  ReplyWriter w3(&out.resp3, 3);
  write(w3);
  return out;
}

// A storage script's reply, as hiredis hands it to the command handlers.
struct RedisReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

RedisReplyPtr StorageReply(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  EXPECT_EQ(redisReaderFeed(reader, resp.data(), resp.size()), REDIS_OK);
  void* reply = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader, &reply), REDIS_OK);
  redisReaderFree(reader);
  EXPECT_NE(reply, nullptr) << resp;
  return RedisReplyPtr(static_cast<redisReply*>(reply));
}

std::string Bulk(const std::string& s) {
  return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}

constexpr int64_t kNowMs = 1'795'000'001'234;

JobEntry MakeJob(const std::string& queue, const std::string& id, const std::string& payload,
                 int64_t tries_left, int64_t ttl_left_s, int64_t attempt, int64_t created_ms) {
  JobEntry j;
  j.ns = "default";
  j.queue = queue;
  j.key = CanonicalKeyOfText(id);
  j.payload = payload;
  j.tries_left = tries_left;
  j.ttl_left_s = ttl_left_s;
  j.attempt = attempt;
  j.created_ms = created_ms;
  return j;
}

// The expected job array, decoded: [queue, id, payload, tries_left, ttl_left_s, attempt,
// elapsed_ms].
void ExpectJobArray(const Value& v, const std::string& queue, const std::string& id,
                    const std::string& payload, int64_t tries_left, int64_t ttl_left_s,
                    int64_t attempt, int64_t elapsed_ms) {
  ASSERT_EQ(v.type, '*');
  ASSERT_EQ(v.items.size(), kJobReplyFields);
  const char types[] = {'$', '$', '$', ':', ':', ':', ':'};
  for (size_t i = 0; i < kJobReplyFields; ++i) EXPECT_EQ(v.items[i].type, types[i]) << i;
  EXPECT_EQ(v.items[0].text, queue);
  EXPECT_EQ(v.items[1].text, id);
  EXPECT_EQ(v.items[2].text, payload);
  EXPECT_EQ(v.items[3].text, std::to_string(tries_left));
  EXPECT_EQ(v.items[4].text, std::to_string(ttl_left_s));
  EXPECT_EQ(v.items[5].text, std::to_string(attempt));
  EXPECT_EQ(v.items[6].text, std::to_string(elapsed_ms));
}

TEST(ReplyShapesTest, EveryWriterPrimitiveCorrespondsAcrossProtocols) {
  const std::vector<std::pair<std::string, std::function<void(ReplyWriter&)>>> shapes = {
      {"simple", [](ReplyWriter& w) { w.Simple("QUEUED"); }},
      {"error", [](ReplyWriter& w) { w.Error("ERR syntax error"); }},
      {"integer", [](ReplyWriter& w) { w.Integer(-42); }},
      {"bulk", [](ReplyWriter& w) { w.Bulk(std::string("a\0\r\nb", 5)); }},
      {"null", [](ReplyWriter& w) { w.Null(); }},
      {"null array", [](ReplyWriter& w) { w.NullArray(); }},
      {"empty array", [](ReplyWriter& w) { w.ArrayHeader(0); }},
      {"map",
       [](ReplyWriter& w) {
         w.MapHeader(2);
         w.Bulk("proto");
         w.Integer(3);
         w.Bulk("modules");
         w.ArrayHeader(0);
       }},
      {"set",
       [](ReplyWriter& w) {
         w.SetHeader(2);
         w.Simple("fast");
         w.Simple("write");
       }},
      {"verbatim", [](ReplyWriter& w) { w.Verbatim("id=7 addr=127.0.0.1:1\n"); }},
      {"double", [](ReplyWriter& w) { w.Double(0.25); }},
      {"true", [](ReplyWriter& w) { w.Bool(true); }},
      {"false", [](ReplyWriter& w) { w.Bool(false); }},
  };
  for (const auto& [name, write] : shapes) {
    const Written out = WriteBoth(write);
    EXPECT_TRUE(Corresponds(DecodeAll(out.resp2), DecodeAll(out.resp3), name));
  }
}

TEST(ReplyShapesTest, AJobIsTheSameSevenElementArrayInBothProtocols) {
  const JobEntry job =
      MakeJob("orders:eu", "order-1", std::string("p\0\r\n", 4), 2, -1, 1, kNowMs - 250);
  const Written out = WriteBoth([&](ReplyWriter& w) { WriteJob(w, job, kNowMs); });
  EXPECT_EQ(out.resp2, out.resp3);
  ExpectJobArray(DecodeAll(out.resp3), "orders:eu", "order-1", std::string("p\0\r\n", 4), 2, -1, 1,
                 250);
}

TEST(ReplyShapesTest, ConsumePeekAndDeadLetterJobListsAreArraysOfJobArraysInBothProtocols) {
  const std::vector<JobEntry> jobs = {MakeJob("q", "a", "x", 0, 86400, 1, kNowMs - 5),
                                      MakeJob("q", "b", "", 4, 10, 2, kNowMs)};
  const std::vector<JobEntry> none;
  struct Case {
    const char* what;
    std::function<void(ReplyWriter&)> write;
  };
  const Case cases[] = {
      {"CONSUME (one job)", [&](ReplyWriter& w) { WriteConsumeReply(w, jobs, false, kNowMs); }},
      {"CONSUME COUNT", [&](ReplyWriter& w) { WriteConsumeReply(w, jobs, true, kNowMs); }},
      {"PEEK / DEADLETTER PEEK", [&](ReplyWriter& w) { WriteJobs(w, jobs, kNowMs); }},
      {"PEEK of an empty queue", [&](ReplyWriter& w) { WriteJobs(w, none, kNowMs); }},
  };
  for (const Case& c : cases) {
    const Written out = WriteBoth(c.write);
    EXPECT_EQ(out.resp2, out.resp3) << c.what;
  }
  const Value one = DecodeAll(WriteBoth(cases[0].write).resp3);
  ExpectJobArray(one, "q", "a", "x", 0, 86400, 1, 5);
  const Value list = DecodeAll(WriteBoth(cases[1].write).resp3);
  ASSERT_EQ(list.items.size(), 2u);
  ExpectJobArray(list.items[0], "q", "a", "x", 0, 86400, 1, 5);
  ExpectJobArray(list.items[1], "q", "b", "", 4, 10, 2, 0);
  EXPECT_EQ(WriteBoth(cases[3].write).resp3, "*0\r\n");
}

TEST(ReplyShapesTest, NoJobIsANullArrayInResp2AndANullInResp3) {
  const std::vector<JobEntry> none;
  for (bool with_count : {false, true}) {
    const Written out =
        WriteBoth([&](ReplyWriter& w) { WriteConsumeReply(w, none, with_count, kNowMs); });
    EXPECT_EQ(out.resp2, "*-1\r\n");
    EXPECT_EQ(out.resp3, "_\r\n");
  }
  for (const std::string nil : {"$-1\r\n", "*0\r\n"}) {  // job.lua: unknown job
    const RedisReplyPtr r = StorageReply(nil);
    const Written out = WriteBoth([&](ReplyWriter& w) { WriteJobInfo(w, "q", "nosuch", r.get()); });
    EXPECT_EQ(out.resp2, "*-1\r\n");
    EXPECT_EQ(out.resp3, "_\r\n");
  }
}

TEST(ReplyShapesTest, JobInfoIsAMapInResp3AndTheSameFlatPairsInResp2) {
  const RedisReplyPtr r = StorageReply("*9\r\n" + Bulk("leased") + Bulk(std::string("b\0n", 3)) +
                                       ":2\r\n:1\r\n:1795000000000\r\n:1795000120000\r\n"
                                       ":-1\r\n$1\r\n0\r\n:5\r\n");
  const Written out = WriteBoth([&](ReplyWriter& w) { WriteJobInfo(w, "q:1", "job-7", r.get()); });
  const Value v2 = DecodeAll(out.resp2), v3 = DecodeAll(out.resp3);
  EXPECT_EQ(v3.type, '%');
  EXPECT_EQ(v2.type, '*');
  EXPECT_TRUE(Corresponds(v2, v3, "JOB"));
  const std::vector<std::string> keys = {"id",         "queue",   "state",      "payload",
                                         "tries_left", "attempt", "created_ms", "due_ms",
                                         "ttl_left_s", "every_s", "backoff_s"};
  ASSERT_EQ(v3.items.size(), 2 * keys.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(v3.items[2 * i].text, keys[i]);
  const std::vector<std::string> values = {
      "job-7", "q:1", "leased", std::string("b\0n", 3), "2", "1", "1795000000000", "1795000120000",
      "-1",    "0",   "5"};
  for (size_t i = 0; i < values.size(); ++i) EXPECT_EQ(v3.items[2 * i + 1].text, values[i]) << i;
}

TEST(ReplyShapesTest, QueueStatsAreAMapInResp3AndTheSameFlatPairsInResp2) {
  // qstat.lua's 15 elements: the 9 shown, nacked/respawned/cancelled (not shown), paused,
  // undelivered (not shown), schedules.
  const RedisReplyPtr r = StorageReply(
      "*15\r\n:1\r\n:2\r\n:3\r\n:4\r\n:5\r\n:6\r\n:7\r\n:8\r\n:9\r\n:0\r\n:0\r\n:0\r\n:10\r\n:"
      "0\r\n:"
      "11\r\n");
  const Written out = WriteBoth([&](ReplyWriter& w) { WriteQueueStats(w, r.get()); });
  const Value v2 = DecodeAll(out.resp2), v3 = DecodeAll(out.resp3);
  EXPECT_EQ(v3.type, '%');
  EXPECT_TRUE(Corresponds(v2, v3, "QSTAT"));
  const std::vector<std::string> keys = {
      "ready",       "delayed",       "leased",     "dead",   "published_total", "consumed_total",
      "acked_total", "expired_total", "dead_total", "paused", "schedules"};
  ASSERT_EQ(v3.items.size(), 2 * keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(v3.items[2 * i].text, keys[i]);
    EXPECT_EQ(v3.items[2 * i + 1].text, std::to_string(i + 1));
  }
}

TEST(ReplyShapesTest, StorageRepliesOfTheWrongShapeAnswerTheSameErrorInBothProtocols) {
  const RedisReplyPtr short_job = StorageReply("*2\r\n" + Bulk("ready") + Bulk("x"));
  const RedisReplyPtr short_stats = StorageReply("*3\r\n:1\r\n:2\r\n:3\r\n");
  for (const Written& out :
       {WriteBoth([&](ReplyWriter& w) { WriteJobInfo(w, "q", "id", short_job.get()); }),
        WriteBoth([&](ReplyWriter& w) { WriteQueueStats(w, short_stats.get()); })}) {
    EXPECT_EQ(out.resp2, "-ERR unexpected reply from storage\r\n");
    EXPECT_EQ(out.resp3, out.resp2);
  }
}

TEST(ReplyShapesTest, DecodedStorageJobsKeepTheirIdsAndFigures) {
  // consume.lua / peek.lua: K, payload, tries_left, ttl_left_s, attempt, created_ms per job.
  const std::string k = CanonicalKeyOfText("custom-id");
  const RedisReplyPtr r =
      StorageReply("*6\r\n" + Bulk(k) + Bulk("pl") + ":3\r\n:-1\r\n:0\r\n:1795000000234\r\n");
  std::vector<JobEntry> jobs;
  ASSERT_TRUE(DecodeJobs(r.get(), 0, "default", "q", &jobs));
  ASSERT_EQ(jobs.size(), 1u);
  const Written out = WriteBoth([&](ReplyWriter& w) { WriteJobs(w, jobs, kNowMs); });
  EXPECT_EQ(out.resp2, out.resp3);
  const Value v = DecodeAll(out.resp3);
  ASSERT_EQ(v.items.size(), 1u);
  ExpectJobArray(v.items[0], "q", "custom-id", "pl", 3, -1, 0, 1000);
}

TEST(ReplyShapesTest, DeadJobsWithErrorsCarryTheReasonOrANullAndTheSameInBothProtocols) {
  // deadletter.lua peek "errors": each job's six fields, then reason (nil: none), attempt, ms.
  const std::string k1 = CanonicalKeyOfText("a"), k2 = CanonicalKeyOfText("b");
  const RedisReplyPtr r =
      StorageReply("*18\r\n" + Bulk(k1) + Bulk("p1") + ":0\r\n:86\r\n:2\r\n:1795000000000\r\n" +
                   Bulk("smtp down") + ":2\r\n:1795000000500\r\n" + Bulk(k2) + Bulk("p2") +
                   ":0\r\n:86\r\n:1\r\n:1795000000000\r\n$-1\r\n:0\r\n:0\r\n");
  std::vector<JobEntry> jobs;
  EXPECT_FALSE(DecodeJobs(r.get(), 0, "default", "q", &jobs)) << "18 is no multiple of 6 jobs";
  jobs.clear();
  ASSERT_TRUE(DecodeJobs(r.get(), 0, "default", "q", &jobs, /*with_errors=*/true));
  ASSERT_EQ(jobs.size(), 2u);
  const Written out = WriteBoth([&](ReplyWriter& w) { WriteJobs(w, jobs, kNowMs, true); });
  const Value v2 = DecodeAll(out.resp2), v3 = DecodeAll(out.resp3);
  EXPECT_TRUE(Corresponds(v2, v3, "DEADLETTER PEEK WITHERRORS"));
  ASSERT_EQ(v3.items.size(), 2u);
  ASSERT_EQ(v3.items[0].items.size(), kJobReplyFields + 3);
  EXPECT_EQ(v3.items[0].items[7].text, "smtp down");
  EXPECT_EQ(v3.items[0].items[8].text, "2");
  EXPECT_EQ(v3.items[0].items[9].text, "1795000000500");
  EXPECT_EQ(v3.items[1].items[7].type, '_');
  EXPECT_EQ(v2.items[1].items[7].type, '$');
  EXPECT_EQ(v3.items[1].items[8].text, "0");
}

TEST(ReplyShapesTest, JobInfoEndsWithTheLastErrorOrANull) {
  for (const bool failed : {true, false}) {
    const std::string error = failed ? Bulk("lease expired") + ":3\r\n:1795000000700\r\n"
                                     : std::string("$-1\r\n:0\r\n:0\r\n");
    const RedisReplyPtr r =
        StorageReply("*12\r\n" + Bulk("dead") + Bulk("p") +
                     ":0\r\n:3\r\n:1795000000000\r\n:1795000000700\r\n:86\r\n:0\r\n:0\r\n" + error);
    const Written out = WriteBoth([&](ReplyWriter& w) { WriteJobInfo(w, "q", "j", r.get()); });
    const Value v2 = DecodeAll(out.resp2), v3 = DecodeAll(out.resp3);
    EXPECT_TRUE(Corresponds(v2, v3, "JOB"));
    ASSERT_EQ(v3.items.size(), 2u * 14);
    EXPECT_EQ(v3.items[22].text, "last_error");
    EXPECT_EQ(v3.items[23].type, failed ? '$' : '_');
    if (failed) {
      EXPECT_EQ(v3.items[23].text, "lease expired");
    }
    EXPECT_EQ(v3.items[24].text, "last_error_attempt");
    EXPECT_EQ(v3.items[25].text, failed ? "3" : "0");
    EXPECT_EQ(v3.items[26].text, "last_error_ms");
  }
}

TEST(ReplyShapesTest, AStorageJobWithANegativeCreationTimeIsNotAJob) {
  // Found by upstream_reply_fuzz: created_ms = INT64_MIN + 1 overflowed elapsed_ms.
  const std::string k = CanonicalKeyOfText("custom-id");
  const RedisReplyPtr r = StorageReply("*6\r\n" + Bulk(k) + Bulk("pl") +
                                       ":0\r\n:86\r\n:0\r\n:-9223372036854775807\r\n");
  std::vector<JobEntry> jobs;
  EXPECT_FALSE(DecodeJobs(r.get(), 0, "default", "q", &jobs));
  EXPECT_TRUE(jobs.empty());
}

TEST(ReplyShapesTest, ElapsedMsOfAJobCreatedAfterNowIsZero) {
  JobEntry job;
  job.queue = "q";
  job.key = CanonicalKeyOfText("id-1");
  job.created_ms = kNowMs + 5000;
  const Written out = WriteBoth([&](ReplyWriter& w) { WriteJob(w, job, kNowMs); });
  ExpectJobArray(DecodeAll(out.resp2), "q", "id-1", "", 0, -1, 0, 0);
}

}  // namespace
}  // namespace deferq::queue
