// Fuzz target: replies from an upstream Redis as src/persist reads them (persist::NewReplyReader,
// fed as the bytes arrive) and the decoders the job commands apply to
// them (persist::ReplyView::Int; queue/model/job_codec.h: DecodeJobs, WriteJob in RESP2 and RESP3).
//
// Input: byte 0 seeds the chunking; the rest is what "Redis" sends. Checked: chunked and whole
// feeding yield the same replies (type and size) or the same protocol error; a decoded job list
// has the shape the scripts promise; writing the jobs out never fails.
#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/check.h"
#include "persist/reply_reader.h"
#include "persist/reply_view.h"
#include "proto/reply_writer.h"
#include "queue/model/job_codec.h"

namespace {

using deferq::proto::ReplyWriter;
using deferq::queue::DecodeJobs;
using deferq::queue::JobEntry;
using deferq::queue::WriteJob;

// A reply's shape, to compare the two runs.
void Describe(const redisReply* r, std::string* out, int depth) {
  out->push_back(static_cast<char>('0' + r->type));
  if (r->type == REDIS_REPLY_ARRAY) {
    out->append(std::to_string(r->elements)).push_back('[');
    for (size_t i = 0; i < r->elements; ++i) Describe(r->element[i], out, depth + 1);
    out->push_back(']');
  } else if (r->type == REDIS_REPLY_INTEGER) {
    out->append(std::to_string(r->integer));
  } else if (r->type != REDIS_REPLY_NIL) {
    out->append(r->str, r->len).push_back('|');
  }
}

// What the job commands do with a reply.
void Decode(const redisReply* r) {
  int64_t v = 0;
  deferq::persist::ReplyView(r).Int(&v);
  for (size_t skip = 0; skip <= 1; ++skip) {
    std::vector<JobEntry> jobs;
    if (!DecodeJobs(r, skip, "ns", "queue", &jobs)) continue;
    DQ_CHECK(r->type == REDIS_REPLY_ARRAY);
    DQ_CHECK(jobs.size() * 6 + skip == r->elements);
    for (int resp = 2; resp <= 3; ++resp) {
      std::string out;
      ReplyWriter w(&out, resp);
      w.ArrayHeader(jobs.size());
      for (const JobEntry& j : jobs) WriteJob(w, j, 1'795'000'000'000);
      DQ_CHECK(!out.empty());
    }
  }
  if (r->type == REDIS_REPLY_ARRAY) {
    for (size_t i = 0; i < r->elements; ++i) deferq::persist::ReplyView(r->element[i]).Int(&v);
  }
}

struct Outcome {
  std::vector<std::string> replies;
  bool error = false;
};

// Pulls every complete reply out of the reader.
void Drain(redisReader* reader, Outcome* out) {
  for (;;) {
    void* obj = nullptr;
    if (redisReaderGetReply(reader, &obj) != REDIS_OK) {
      out->error = true;
      return;
    }
    if (obj == nullptr) return;
    auto* reply = static_cast<redisReply*>(obj);
    std::string shape;
    Describe(reply, &shape, 0);
    out->replies.push_back(std::move(shape));
    Decode(reply);
    freeReplyObject(reply);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  const size_t len = size - 1;

  Outcome whole;
  {
    redisReader* reader = deferq::persist::NewReplyReader();
    DQ_CHECK(reader != nullptr);
    if (len > 0) redisReaderFeed(reader, bytes, len);
    Drain(reader, &whole);
    redisReaderFree(reader);
  }
  Outcome chunked;
  {
    redisReader* reader = deferq::persist::NewReplyReader();
    uint32_t rng = data[0] * 2654435761u + 7;
    for (size_t off = 0; off < len && !chunked.error;) {
      rng = rng * 1103515245u + 12345u;
      const size_t n = std::min<size_t>(len - off, 1 + (rng >> 16) % 11);
      redisReaderFeed(reader, bytes + off, n);
      off += n;
      Drain(reader, &chunked);
    }
    redisReaderFree(reader);
  }
  DQ_CHECK(whole.error == chunked.error);
  DQ_CHECK(whole.replies == chunked.replies);
  return 0;
}
