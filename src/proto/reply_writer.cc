// RESP2/RESP3 reply encoding (see reply_writer.h). Every method appends straight to the output
// buffer; numbers go through std::to_chars into a small stack buffer so a header is one append.
#include "proto/reply_writer.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <system_error>

namespace deferq::proto {
namespace {

constexpr std::string_view kCrlf = "\r\n";

// Appends "<marker><n>\r\n", the shape of every RESP length or integer line.
template <typename Int>
void AppendLine(std::string* out, char marker, Int n) {
  char buf[24];  // marker + 20 digits (or '-' and 19 digits) + CRLF
  buf[0] = marker;
  char* end = std::to_chars(buf + 1, buf + sizeof(buf) - 2, n).ptr;
  *end++ = '\r';
  *end++ = '\n';
  out->append(buf, static_cast<size_t>(end - buf));
}

// Appends s with every CR and LF turned into a space, so a message can never break the framing.
void AppendOneLine(std::string* out, std::string_view s) {
  const size_t start = out->size();
  out->append(s);
  char* p = out->data() + start;
  char* const end = out->data() + out->size();
  for (; p < end; ++p) {
    if (*p == '\r' || *p == '\n') *p = ' ';
  }
}

// Formats d with the layout of "%.17g" but the shortest digits that read back as the same double
// (what Redis 7.2 writes): fixed notation for decimal exponents in [-4, 17), scientific with a
// two-digit-minimum exponent otherwise, no trailing zeros. Returns the length written to buf.
size_t FormatDouble(double d, char* buf, size_t size) {
  if (std::isinf(d)) {
    const std::string_view text = d > 0 ? "inf" : "-inf";
    std::memcpy(buf, text.data(), text.size());
    return text.size();
  }
  if (std::isnan(d)) {
    std::memcpy(buf, "nan", 3);
    return 3;
  }
  char* end = std::to_chars(buf, buf + size, d, std::chars_format::scientific).ptr;
  const char* e = static_cast<const char*>(std::memchr(buf, 'e', static_cast<size_t>(end - buf)));
  int exponent = 0;
  if (e != nullptr) {
    const char* digits = e + 1;
    if (*digits == '+') ++digits;
    std::from_chars(digits, end, exponent);
  }
  if (exponent >= -4 && exponent < 17) {
    end = std::to_chars(buf, buf + size, d, std::chars_format::fixed).ptr;
  }
  return static_cast<size_t>(end - buf);
}

}  // namespace

void ReplyWriter::Simple(std::string_view s) {
  out_->push_back('+');
  AppendOneLine(out_, s);
  out_->append(kCrlf);
}

void ReplyWriter::Error(std::string_view msg) {
  out_->push_back('-');
  // An error reply starts with its code word ("ERR", "NOAUTH", "WRONGTYPE" ...); clients split on
  // it, so a message without one gets the generic code.
  if (msg.empty() || msg[0] < 'A' || msg[0] > 'Z') out_->append("ERR ");
  AppendOneLine(out_, msg);
  out_->append(kCrlf);
}

void ReplyWriter::Integer(int64_t v) { AppendLine(out_, ':', v); }

void ReplyWriter::Bulk(std::string_view s) {
  AppendLine(out_, '$', s.size());
  out_->append(s);
  out_->append(kCrlf);
}

void ReplyWriter::Null() {
  if (resp_ >= 3) {
    out_->append("_\r\n");
  } else {
    out_->append("$-1\r\n");
  }
}

void ReplyWriter::NullArray() {
  if (resp_ >= 3) {
    out_->append("_\r\n");
  } else {
    out_->append("*-1\r\n");
  }
}

void ReplyWriter::ArrayHeader(size_t n) { AppendLine(out_, '*', n); }

void ReplyWriter::MapHeader(size_t pairs) {
  if (resp_ >= 3) {
    AppendLine(out_, '%', pairs);
  } else {
    AppendLine(out_, '*', pairs * 2);
  }
}

void ReplyWriter::SetHeader(size_t n) { AppendLine(out_, resp_ >= 3 ? '~' : '*', n); }

void ReplyWriter::Verbatim(std::string_view s) {
  if (resp_ < 3) {
    Bulk(s);
    return;
  }
  AppendLine(out_, '=', s.size() + 4);
  out_->append("txt:");
  out_->append(s);
  out_->append(kCrlf);
}

void ReplyWriter::Double(double d) {
  char buf[64];
  const std::string_view text(buf, FormatDouble(d, buf, sizeof(buf)));
  if (resp_ >= 3) {
    out_->push_back(',');
    out_->append(text);
    out_->append(kCrlf);
  } else {
    Bulk(text);
  }
}

void ReplyWriter::Bool(bool b) {
  if (resp_ >= 3) {
    out_->append(b ? "#t\r\n" : "#f\r\n");
  } else {
    out_->append(b ? ":1\r\n" : ":0\r\n");
  }
}

}  // namespace deferq::proto
