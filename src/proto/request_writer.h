// RESP request encoding: a command as an array of bulk strings, the form every Redis command is
// sent in (persist's upstream connections write their requests with it). The other direction of
// reply_writer.h; like it, it knows no command.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace deferq::proto {

// Appends `*<n>\r\n`, the header of an array of n elements.
void AppendArrayHeader(std::string* out, size_t n);
// Appends `$<len>\r\n<s>\r\n`.
void AppendBulk(std::string* out, std::string_view s);
// Appends a whole command: the array header, then each argument as a bulk string.
void AppendCommand(std::string* out, std::initializer_list<std::string_view> args);

}  // namespace deferq::proto
