#include "proto/request_writer.h"

#include <charconv>

namespace deferq::proto {

void AppendArrayHeader(std::string* out, size_t n) {
  char buf[24];
  out->push_back('*');
  auto r = std::to_chars(buf, buf + sizeof(buf), n);
  out->append(buf, r.ptr);
  out->append("\r\n");
}

void AppendBulk(std::string* out, std::string_view s) {
  char buf[24];
  out->push_back('$');
  auto r = std::to_chars(buf, buf + sizeof(buf), s.size());
  out->append(buf, r.ptr);
  out->append("\r\n");
  out->append(s);
  out->append("\r\n");
}

void AppendCommand(std::string* out, std::initializer_list<std::string_view> args) {
  AppendArrayHeader(out, args.size());
  for (std::string_view a : args) AppendBulk(out, a);
}

}  // namespace deferq::proto
