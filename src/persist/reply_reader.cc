#include "persist/reply_reader.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <charconv>

namespace deferq::persist {
namespace {

// hiredis's default functions (the ones redisReaderCreate installs), copied once: the table is
// static inside hiredis and only reachable through a reader.
const redisReplyObjectFunctions& DefaultFunctions() {
  static const redisReplyObjectFunctions functions = [] {
    redisReader* probe = redisReaderCreate();
    redisReplyObjectFunctions f = *probe->fn;
    redisReaderFree(probe);
    return f;
  }();
  return functions;
}

#if HIREDIS_MAJOR >= 1
void* CreateBoundedArray(const redisReadTask* task, size_t elements) {
#else
void* CreateBoundedArray(const redisReadTask* task, int elements) {
#endif
  // NULL is what hiredis expects from an allocation failure: the read fails with an error.
  if (elements > 0 && static_cast<size_t>(elements) > kMaxReplyElements) return nullptr;
  return DefaultFunctions().createArray(task, elements);
}

redisReplyObjectFunctions* BoundedFunctions() {
  // hiredis keeps the pointer, so the table lives for the whole program.
  static redisReplyObjectFunctions functions = [] {
    redisReplyObjectFunctions f = DefaultFunctions();
    f.createArray = &CreateBoundedArray;
    return f;
  }();
  return &functions;
}

}  // namespace

redisReader* NewReplyReader() { return redisReaderCreateWithFunctions(BoundedFunctions()); }

bool ReplyInteger(const redisReply* r, int64_t* out) {
  if (r->type == REDIS_REPLY_INTEGER) {
    *out = r->integer;
    return true;
  }
  if (r->type == REDIS_REPLY_STRING) {
    return std::from_chars(r->str, r->str + r->len, *out).ec == std::errc();
  }
  return false;
}

void AppendDueEntries(const redisReply* flat, std::vector<std::pair<std::string, int64_t>>* out) {
  if (flat == nullptr || flat->type != REDIS_REPLY_ARRAY) return;
  for (size_t i = 0; i + 1 < flat->elements; i += 2) {
    const redisReply* tag = flat->element[i];
    int64_t due = 0;
    if (tag->type != REDIS_REPLY_STRING || !ReplyInteger(flat->element[i + 1], &due)) continue;
    out->emplace_back(std::string(tag->str, tag->len), due);
  }
}

}  // namespace deferq::persist
