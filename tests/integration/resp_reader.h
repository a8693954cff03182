// A minimal RESP2/RESP3 reply parser for tests that talk to the server over raw sockets.
// hiredis 0.14 cannot read RESP3 (maps, `_` nulls), and misbehaving-client tests need the exact
// bytes of every reply, so this parser frames replies out of a byte stream and keeps their values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deferq::testing {

struct RespValue {
  // The RESP type byte: '+' '-' ':' '$' '*' '%' '~' '_' ',' '#' '=' '(' '>' '|'.
  char type = 0;
  bool is_null = false;          // `$-1`, `*-1` (RESP2) and `_` (RESP3)
  std::string str;               // simple/bulk/verbatim strings, errors, doubles, big numbers
  int64_t integer = 0;           // ':' values, '#' as 0/1
  std::vector<RespValue> items;  // arrays, sets, pushes; maps and attributes flattened as k, v, ...

  bool IsString() const { return (type == '$' || type == '+') && !is_null; }
  bool IsError() const { return type == '-'; }
  // For maps and flat RESP2 field/value arrays: the value for `key`, or nullptr.
  const RespValue* Find(std::string_view key) const;
  // A one-line rendering for assertion messages.
  std::string Describe() const;
};

enum class ParseStatus { kOk, kIncomplete, kMalformed };

// Parses one reply from the front of `input`. On kOk, `*consumed` is the length of its frame.
ParseStatus ParseReply(std::string_view input, RespValue* out, size_t* consumed);

// Escapes bytes for readable assertion output ("\r\n" shown as such, other non-printables as \xNN).
std::string Printable(std::string_view bytes);

}  // namespace deferq::testing
