#include "resp_reader.h"

#include <charconv>
#include <cstdio>

namespace deferq::testing {

namespace {

// Nesting is bounded so that a hostile or broken reply cannot overflow the test's stack.
constexpr int kMaxDepth = 16;

// Finds the CRLF-terminated line starting at `pos`; returns false when it is not complete yet.
bool ReadLine(std::string_view input, size_t pos, std::string_view* line, size_t* next) {
  size_t end = input.find("\r\n", pos);
  if (end == std::string_view::npos) return false;
  *line = input.substr(pos, end - pos);
  *next = end + 2;
  return true;
}

bool ToInt(std::string_view text, int64_t* value) {
  if (text.empty()) return false;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return ec == std::errc() && ptr == text.data() + text.size();
}

ParseStatus ParseAt(std::string_view input, size_t pos, int depth, RespValue* out, size_t* next) {
  if (depth > kMaxDepth) return ParseStatus::kMalformed;
  if (pos >= input.size()) return ParseStatus::kIncomplete;
  out->type = input[pos];
  std::string_view line;
  size_t after_line = 0;
  if (!ReadLine(input, pos + 1, &line, &after_line)) return ParseStatus::kIncomplete;
  switch (out->type) {
    case '+':
    case '-':
    case ',':
    case '(':
      out->str = std::string(line);
      *next = after_line;
      return ParseStatus::kOk;
    case ':':
      if (!ToInt(line, &out->integer)) return ParseStatus::kMalformed;
      *next = after_line;
      return ParseStatus::kOk;
    case '#':
      if (line != "t" && line != "f") return ParseStatus::kMalformed;
      out->integer = line == "t" ? 1 : 0;
      *next = after_line;
      return ParseStatus::kOk;
    case '_':
      if (!line.empty()) return ParseStatus::kMalformed;
      out->is_null = true;
      *next = after_line;
      return ParseStatus::kOk;
    case '$':
    case '=': {
      int64_t len = 0;
      if (!ToInt(line, &len) || len < -1) return ParseStatus::kMalformed;
      if (len == -1) {
        out->is_null = true;
        *next = after_line;
        return ParseStatus::kOk;
      }
      if (input.size() < after_line + static_cast<size_t>(len) + 2) return ParseStatus::kIncomplete;
      if (input.substr(after_line + len, 2) != "\r\n") return ParseStatus::kMalformed;
      out->str = std::string(input.substr(after_line, len));
      *next = after_line + len + 2;
      return ParseStatus::kOk;
    }
    case '*':
    case '~':
    case '>':
    case '%':
    case '|': {
      int64_t count = 0;
      if (!ToInt(line, &count) || count < -1) return ParseStatus::kMalformed;
      if (count == -1) {
        out->is_null = true;
        *next = after_line;
        return ParseStatus::kOk;
      }
      if (out->type == '%' || out->type == '|') count *= 2;
      size_t cursor = after_line;
      // No reserve(count): the count comes from the peer.
      for (int64_t i = 0; i < count; ++i) {
        RespValue item;
        ParseStatus status = ParseAt(input, cursor, depth + 1, &item, &cursor);
        if (status != ParseStatus::kOk) return status;
        out->items.push_back(std::move(item));
      }
      *next = cursor;
      return ParseStatus::kOk;
    }
    default:
      return ParseStatus::kMalformed;
  }
}

}  // namespace

const RespValue* RespValue::Find(std::string_view key) const {
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (items[i].str == key) return &items[i + 1];
  }
  return nullptr;
}

std::string RespValue::Describe() const {
  if (is_null) return std::string(1, type) + "null";
  switch (type) {
    case ':':
    case '#':
      return std::string(1, type) + std::to_string(integer);
    case '*':
    case '~':
    case '>':
    case '%':
    case '|': {
      std::string text(1, type);
      text += "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) text += ", ";
        text += items[i].Describe();
      }
      return text + "]";
    }
    default:
      return std::string(1, type) + "\"" + Printable(str) + "\"";
  }
}

ParseStatus ParseReply(std::string_view input, RespValue* out, size_t* consumed) {
  *out = RespValue();
  size_t next = 0;
  ParseStatus status = ParseAt(input, 0, 0, out, &next);
  if (status == ParseStatus::kOk) *consumed = next;
  return status;
}

std::string Printable(std::string_view bytes) {
  std::string text;
  for (unsigned char c : bytes) {
    if (c == '\r') {
      text += "\\r";
    } else if (c == '\n') {
      text += "\\n";
    } else if (c == '\\') {
      text += "\\\\";
    } else if (c < 0x20 || c >= 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      text += hex;
    } else {
      text += static_cast<char>(c);
    }
  }
  return text;
}

}  // namespace deferq::testing
