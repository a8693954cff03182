#include "persist/reply_view.h"

#include <hiredis/hiredis.h>

#include <charconv>

#include "base/check.h"
#include "persist/reply_reader.h"

namespace deferq::persist {

bool ReplyView::is_array() const { return r_ != nullptr && r_->type == REDIS_REPLY_ARRAY; }
bool ReplyView::is_string() const { return r_ != nullptr && r_->type == REDIS_REPLY_STRING; }
bool ReplyView::is_status() const { return r_ != nullptr && r_->type == REDIS_REPLY_STATUS; }
bool ReplyView::is_integer() const { return r_ != nullptr && r_->type == REDIS_REPLY_INTEGER; }
bool ReplyView::is_nil() const { return r_ != nullptr && r_->type == REDIS_REPLY_NIL; }
bool ReplyView::is_error() const { return r_ != nullptr && r_->type == REDIS_REPLY_ERROR; }

size_t ReplyView::size() const { return is_array() ? r_->elements : 0; }

ReplyView ReplyView::operator[](size_t i) const {
  DQ_DCHECK(i < size());
  return ReplyView(r_->element[i]);
}

std::string_view ReplyView::str() const {
  if (is_string() || is_status() || is_error()) return {r_->str, r_->len};
  return {};
}

int64_t ReplyView::integer() const { return is_integer() ? r_->integer : 0; }

bool ReplyView::Int(int64_t* out) const {
  if (r_ == nullptr) return false;
  if (is_integer()) {
    *out = r_->integer;
    return true;
  }
  if (is_string() || is_status()) {
    auto [p, ec] = std::from_chars(r_->str, r_->str + r_->len, *out);
    return ec == std::errc() && p == r_->str + r_->len;
  }
  if (is_nil()) {
    *out = 0;
    return true;
  }
  return false;
}

void ReplyList::Free::operator()(redisReply* r) const { freeReplyObject(r); }

bool ReplyList::Parse(std::string_view bytes, size_t expected) {
  replies_.clear();
  redisReader* reader = NewReplyReader();
  redisReaderFeed(reader, bytes.data(), bytes.size());
  for (;;) {
    void* reply = nullptr;
    if (redisReaderGetReply(reader, &reply) != REDIS_OK || reply == nullptr) break;
    replies_.emplace_back(static_cast<redisReply*>(reply));
  }
  redisReaderFree(reader);
  return replies_.size() == expected;
}

}  // namespace deferq::persist
