// A read-only view of one upstream reply (hiredis's redisReply), for the rooms above persist:
// they read replies through it and never include hiredis. Cheap to copy (one pointer); valid as
// long as the reply it views (an UpstreamResult's reply lives until its callback returns).
// Upstream connections speak RESP2, so an array is the only aggregate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

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

}  // namespace deferq::persist
