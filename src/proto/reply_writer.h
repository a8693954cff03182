// RESP reply writer: appends RESP2 or RESP3 replies (chosen per connection, RESP3 after HELLO 3)
// to an output buffer. Callers describe replies by meaning (map, null, verbatim text) and the
// writer picks the encoding of the connection's protocol version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deferq::proto {

class ReplyWriter {
 public:
  ReplyWriter(std::string* out, int resp_version) : out_(out), resp_(resp_version) {}

  int resp() const { return resp_; }
  void set_resp(int v) { resp_ = v; }
  std::string* buffer() const { return out_; }

  void Simple(std::string_view s);  // +s   (CR/LF in s replaced by spaces)
  void Ok() { Simple("OK"); }
  // -msg. msg starts with the error code ("ERR ...", "NOAUTH ..."); CR/LF are replaced by spaces,
  // and a msg that does not start with an upper-case code word gets "ERR " prepended.
  void Error(std::string_view msg);
  void Integer(int64_t v);            // :v
  void Bulk(std::string_view s);      // $len s
  void Null();                        // RESP2 $-1, RESP3 _
  void NullArray();                   // RESP2 *-1, RESP3 _
  void ArrayHeader(size_t n);         // *n
  void MapHeader(size_t pairs);       // RESP2 *2n, RESP3 %n
  void SetHeader(size_t n);           // RESP2 *n, RESP3 ~n
  void Verbatim(std::string_view s);  // RESP2 bulk, RESP3 =len "txt:" s
  void Double(double d);              // RESP2 bulk of the shortest round-trip text, RESP3 ,d
  void Bool(bool b);                  // RESP2 :1/:0, RESP3 #t/#f

 private:
  std::string* out_;
  int resp_;
};

}  // namespace deferq::proto
