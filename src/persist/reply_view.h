// A read-only view of one upstream reply (hiredis's redisReply), for the rooms above persist:
// they read replies through it and never include hiredis. Cheap to copy (one pointer); valid as
// long as the reply it views (an UpstreamResult's reply lives until its callback returns).
// Upstream connections speak RESP2, so an array is the only aggregate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

struct redisReply;

namespace deferq::persist {

class ReplyView {
 public:
  ReplyView() = default;
  ReplyView(const redisReply* r) : r_(r) {}  // NOLINT: implicit, as a pointer converts

  bool operator==(std::nullptr_t) const { return r_ == nullptr; }
  bool is_array() const;
  bool is_string() const;  // a bulk string
  bool is_status() const;  // +OK
  bool is_integer() const;
  bool is_nil() const;
  bool is_error() const;

  // Elements of an array (0 for anything else); element i, which must exist.
  size_t size() const;
  ReplyView operator[](size_t i) const;
  // The bytes of a string, status or error reply ("" for anything else).
  std::string_view str() const;
  int64_t integer() const;  // of an integer reply (0 for anything else)
  // An integer reply, a string holding a whole integer (a score, a number Lua returned as
  // text), or nil (0: a script's missing figure), as *out.
  bool Int(int64_t* out) const;

  const redisReply* raw() const { return r_; }

 private:
  const redisReply* r_ = nullptr;
};

// Replies parsed from RESP bytes (deferq's own replies to an internal connection: the console's
// pages), owned; viewed with ReplyView.
class ReplyList {
 public:
  // Every whole reply in `bytes`; false when they are not exactly `expected` replies.
  bool Parse(std::string_view bytes, size_t expected);
  size_t size() const { return replies_.size(); }
  ReplyView operator[](size_t i) const { return replies_[i].get(); }

 private:
  struct Free {
    void operator()(redisReply* r) const;
  };
  std::vector<std::unique_ptr<redisReply, Free>> replies_;
};

}  // namespace deferq::persist
