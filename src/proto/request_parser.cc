// RESP request parsing (see request_parser.h for the contract).
//
// How the pieces cooperate:
//  * Feed() only appends to `in`; the consumed prefix is dropped lazily, when that is cheap.
//  * Next() looks at the first byte of the next request. Inline lines are found and split here
//    with Redis's sdssplitargs rules.
//  * A '*' request is walked by a small resumable header scanner: it reads the "*N" line and each
//    "$L" line as soon as they are complete and checks them against the limits, so a bad header
//    is refused before a single body byte is buffered. For a body it only remembers where the
//    body ends, so a body arriving in many small chunks costs O(1) per chunk, never a rescan.
//  * Once the scanner has seen a whole frame, exactly that frame is fed to the hiredis reader,
//    whose object callbacks append every bulk string to args_ as a view into hiredis's buffer
//    (no redisReply objects, no per-argument copies). Feeding whole frames and nothing more means
//    hiredis always finishes with an empty buffer, so its 1 KiB compaction never moves bytes, and
//    hiredis cannot disagree with the scanner about where a frame ends.
//
// Error texts and the order in which checks fire follow Redis 7.0 networking.c
// (processMultibulkBuffer / processInlineBuffer).
#include "proto/request_parser.h"

#include <hiredis/hiredis.h>
#include <hiredis/read.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>

namespace deferq::proto {
namespace {

constexpr char kErrTooBigMbulk[] = "ERR Protocol error: too big mbulk count string";
constexpr char kErrInvalidMbulk[] = "ERR Protocol error: invalid multibulk length";
constexpr char kErrTooBigBulk[] = "ERR Protocol error: too big bulk count string";
constexpr char kErrInvalidBulk[] = "ERR Protocol error: invalid bulk length";
constexpr char kErrTooBigInline[] = "ERR Protocol error: too big inline request";
constexpr char kErrUnbalanced[] = "ERR Protocol error: unbalanced quotes in request";

// hiredis 0.14 indexes its buffer with int (sdsrange, seekNewline), so a frame handed to it must
// stay well below 2 GiB, which max_args x max_bulk_len alone does not ensure. 1 GiB is Redis's
// default client-query-buffer-limit, past which Redis drops the client.
constexpr size_t kMaxFrameBytes = size_t{1} << 30;

// A fully consumed input buffer bigger than this is released rather than kept for reuse, so a
// connection that once sent a large payload does not pin that memory while idle.
constexpr size_t kMaxIdleBufferCapacity = 64 * 1024;

// Redis's string2ll: an optional '-', then "0" or a digit 1-9 followed by digits; no '+', no
// spaces, no leading zeros, at most 20 characters, and the value must fit in a long long.
bool ParseRedisLongLong(const char* p, size_t n, long long* value) {
  if (n == 0 || n >= 21) return false;
  if (n == 1 && p[0] == '0') {
    *value = 0;
    return true;
  }
  bool negative = false;
  size_t i = 0;
  if (p[0] == '-') {
    negative = true;
    if (++i == n) return false;
  }
  if (p[i] < '1' || p[i] > '9') return false;
  unsigned long long v = static_cast<unsigned long long>(p[i++] - '0');
  for (; i < n; ++i) {
    if (p[i] < '0' || p[i] > '9') return false;
    const unsigned digit = static_cast<unsigned>(p[i] - '0');
    if (v > (ULLONG_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  if (negative) {
    if (v > static_cast<unsigned long long>(LLONG_MAX) + 1) return false;
    *value = v == static_cast<unsigned long long>(LLONG_MAX) + 1 ? LLONG_MIN
                                                                 : -static_cast<long long>(v);
  } else {
    if (v > static_cast<unsigned long long>(LLONG_MAX)) return false;
    *value = static_cast<long long>(v);
  }
  return true;
}

// isspace() in the C locale, which is what sdssplitargs uses to skip blanks and to accept what
// follows a closing quote. Note that inside an unquoted token only ' ', '\t', '\r', '\n' end it.
bool IsBlank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

bool IsHexDigit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return c - 'A' + 10;
}

// Splits the inline line [p, end) with sdssplitargs's rules, writing the unescaped bytes to
// `out` (which must hold end - p bytes: unescaping never grows the text) and a view per argument
// to `args`. Returns false on unbalanced quotes (or a closing quote followed by a non-blank).
// Unlike sdssplitargs, a NUL byte is an ordinary byte here (Redis stops at it, see the report).
bool SplitInlineArgs(const char* p, const char* end, char* out,
                     std::vector<std::string_view>* args) {
  for (;;) {
    while (p < end && IsBlank(*p)) ++p;
    if (p == end) return true;
    char* const token = out;
    bool in_double = false;
    bool in_single = false;
    for (bool done = false; !done;) {
      if (in_double) {
        if (p == end) return false;
        if (*p == '\\' && end - p >= 4 && p[1] == 'x' && IsHexDigit(p[2]) && IsHexDigit(p[3])) {
          *out++ = static_cast<char>(HexValue(p[2]) * 16 + HexValue(p[3]));
          p += 4;
        } else if (*p == '\\' && end - p >= 2) {
          char c = p[1];
          switch (c) {
            case 'n':
              c = '\n';
              break;
            case 'r':
              c = '\r';
              break;
            case 't':
              c = '\t';
              break;
            case 'b':
              c = '\b';
              break;
            case 'a':
              c = '\a';
              break;
            default:
              break;  // \\ \" and any other escaped byte stand for themselves
          }
          *out++ = c;
          p += 2;
        } else if (*p == '"') {
          if (p + 1 < end && !IsBlank(p[1])) return false;
          done = true;
          ++p;
        } else {
          *out++ = *p++;
        }
      } else if (in_single) {
        if (p == end) return false;
        if (*p == '\\' && end - p >= 2 && p[1] == '\'') {
          *out++ = '\'';
          p += 2;
        } else if (*p == '\'') {
          if (p + 1 < end && !IsBlank(p[1])) return false;
          done = true;
          ++p;
        } else {
          *out++ = *p++;
        }
      } else if (p == end) {
        done = true;
      } else {
        switch (*p) {
          case ' ':
          case '\n':
          case '\r':
          case '\t':
            done = true;
            break;
          case '"':
            in_double = true;
            break;
          case '\'':
            in_single = true;
            break;
          default:
            *out++ = *p;
            break;
        }
        ++p;
      }
    }
    args->emplace_back(token, static_cast<size_t>(out - token));
  }
}

// Returned to hiredis as the "object" for every array and string: hiredis treats NULL as out of
// memory, and the real data lives in args_.
char kHiredisObject;

}  // namespace

struct RequestParser::Impl {
  enum class State {
    kIdle,           // between requests
    kInline,         // waiting for the '\n' of an inline line
    kMultibulkLine,  // waiting for the "*N\r" line
    kBulkLine,       // waiting for the "$L\r" line of the next element
    kBulkBody,       // waiting for the body of the current element (up to frame offset `cursor`)
  };
  enum class LineStatus { kFound, kNeedMore, kTooLong };

  explicit Impl(RequestParser* owner);
  ~Impl() { redisReaderFree(reader); }

  // Searches the line starting at frame offset `line` for `terminator`, resuming where the last
  // search stopped. kFound sets *at to the terminator's frame offset. kTooLong means more than
  // max_inline_len bytes precede any terminator (checked against the bytes seen so far, so the
  // outcome never depends on how the bytes were chunked).
  LineStatus FindLine(size_t line, char terminator, size_t* at);

  size_t available() const { return in.size() - pos; }

  // hiredis object callbacks: privdata is the RequestParser, strings become views in args_.
  static void* CreateString(const redisReadTask* task, char* str, size_t len);
#if HIREDIS_MAJOR >= 1
  static void* CreateArray(const redisReadTask* task, size_t elements);
#else
  static void* CreateArray(const redisReadTask* task, int elements);
#endif
  static void* CreateUnexpected(const redisReadTask*) { return nullptr; }
  static void* CreateUnexpectedInteger(const redisReadTask*, long long) { return nullptr; }
  static void FreeObject(void*) {}
  static redisReplyObjectFunctions* Functions();

  size_t max_inline_len;
  redisReader* reader = nullptr;
  std::string in;  // bytes fed; [pos, in.size()) are not consumed by a returned command yet
  size_t pos = 0;  // start of the request being parsed; scanner offsets are relative to it
  State state = State::kIdle;
  size_t cursor = 0;       // frame offset of the current header line, or of the body's end
  size_t searched = 0;     // bytes of the current line already searched for its terminator
  long long elements = 0;  // elements announced by the "*N" line
  long long elements_left = 0;
  std::string arena;  // unescaped inline arguments; args_ views point into it
  bool failed = false;
};

redisReplyObjectFunctions* RequestParser::Impl::Functions() {
  // hiredis keeps the pointer, so the table lives for the whole program. Fields are assigned by
  // name because their set and order differ between hiredis 0.14 and 1.x.
  static redisReplyObjectFunctions functions = [] {
    redisReplyObjectFunctions f{};
    f.createString = &Impl::CreateString;
    f.createArray = &Impl::CreateArray;
    // The scanner only lets arrays of bulk strings through, so these never run; if they did,
    // NULL makes hiredis report an error instead of silently dropping an element.
    f.createInteger = &Impl::CreateUnexpectedInteger;
    f.createNil = &Impl::CreateUnexpected;
    f.freeObject = &Impl::FreeObject;
    return f;
  }();
  return &functions;
}

RequestParser::Impl::Impl(RequestParser* owner) : max_inline_len(owner->limits_.max_inline_len) {
  reader = redisReaderCreateWithFunctions(Functions());
  if (reader == nullptr) throw std::bad_alloc();
  reader->privdata = owner;
}

void* RequestParser::Impl::CreateString(const redisReadTask* task, char* str, size_t len) {
  auto* parser = static_cast<RequestParser*>(task->privdata);
  if (task->parent == nullptr) return nullptr;  // a bare string is not a command
  parser->args_.emplace_back(str, len);
  return &kHiredisObject;
}

#if HIREDIS_MAJOR >= 1
void* RequestParser::Impl::CreateArray(const redisReadTask* task, size_t elements) {
#else
void* RequestParser::Impl::CreateArray(const redisReadTask* task, int elements) {
#endif
  if (task->parent != nullptr) return nullptr;  // nested arrays are not commands
  // Safe to reserve by the client's count: the whole frame is already buffered, so the count is
  // bounded by the bytes actually received.
  static_cast<RequestParser*>(task->privdata)->args_.reserve(static_cast<size_t>(elements));
  return &kHiredisObject;
}

RequestParser::Impl::LineStatus RequestParser::Impl::FindLine(size_t line, char terminator,
                                                              size_t* at) {
  const char* base = in.data() + pos + line;
  const size_t avail = available() - line;
  // The terminator may sit at index max_inline_len at the latest (that many bytes before it).
  const size_t window = max_inline_len == SIZE_MAX ? avail : std::min(avail, max_inline_len + 1);
  if (searched < window) {
    const void* hit = std::memchr(base + searched, terminator, window - searched);
    if (hit != nullptr) {
      searched = static_cast<size_t>(static_cast<const char*>(hit) - base);
      *at = line + searched;
      return LineStatus::kFound;
    }
    searched = window;
  }
  return avail > max_inline_len ? LineStatus::kTooLong : LineStatus::kNeedMore;
}

RequestParser::RequestParser(const ParserLimits& limits)
    : limits_(limits), impl_(std::make_unique<Impl>(this)) {}

RequestParser::~RequestParser() = default;

void RequestParser::Feed(const char* data, size_t len) {
  Impl& m = *impl_;
  if (m.failed || len == 0) return;  // the connection is closing; nothing more will be parsed
  if (m.pos > 0) {
    const size_t rest = m.in.size() - m.pos;
    if (rest == 0) {
      if (m.in.capacity() > kMaxIdleBufferCapacity) {
        std::string().swap(m.in);
      } else {
        m.in.clear();
      }
      m.pos = 0;
    } else if (m.pos >= rest || m.in.size() + len > m.in.capacity()) {
      // Moving the unconsumed tail costs no more than the bytes consumed since the last move (or
      // less than the reallocation the append would do), so compaction stays linear overall.
      m.in.erase(0, m.pos);
      m.pos = 0;
    }
  }
  m.in.append(data, len);
}

size_t RequestParser::buffered() const { return impl_->available(); }

ParseStatus RequestParser::Next() {
  Impl& m = *impl_;
  args_.clear();
  if (m.failed) return ParseStatus::kError;
  auto fail = [&](std::string text) {
    m.failed = true;
    args_.clear();
    error_ = std::move(text);
    return ParseStatus::kError;
  };

  for (;;) {
    switch (m.state) {
      case Impl::State::kIdle: {
        if (m.available() == 0) return ParseStatus::kNeedMore;
        // As Redis: the first byte picks the framing of the whole request.
        m.state = m.in[m.pos] == '*' ? Impl::State::kMultibulkLine : Impl::State::kInline;
        m.cursor = 0;
        m.searched = 0;
        break;
      }

      case Impl::State::kInline: {
        size_t newline = 0;
        switch (m.FindLine(0, '\n', &newline)) {
          case Impl::LineStatus::kNeedMore:
            return ParseStatus::kNeedMore;
          case Impl::LineStatus::kTooLong:
            return fail(kErrTooBigInline);
          case Impl::LineStatus::kFound:
            break;
        }
        const char* line = m.in.data() + m.pos;
        size_t line_len = newline;
        if (line_len > 0 && line[line_len - 1] == '\r') --line_len;
        if (m.arena.size() < line_len) m.arena.resize(line_len);
        if (!SplitInlineArgs(line, line + line_len, m.arena.data(), &args_)) {
          return fail(kErrUnbalanced);
        }
        // max_args holds for inline commands too (Redis has no such check, but its limit is
        // never below what 64 KiB of inline text can carry; deferq's may be set lower).
        if (args_.size() > limits_.max_args) return fail(kErrInvalidMbulk);
        m.pos += newline + 1;
        m.state = Impl::State::kIdle;
        if (!args_.empty()) return ParseStatus::kCommand;
        break;  // a blank line is no command
      }

      case Impl::State::kMultibulkLine: {
        size_t cr = 0;
        switch (m.FindLine(0, '\r', &cr)) {
          case Impl::LineStatus::kNeedMore:
            return ParseStatus::kNeedMore;
          case Impl::LineStatus::kTooLong:
            return fail(kErrTooBigMbulk);
          case Impl::LineStatus::kFound:
            break;
        }
        if (cr + 2 > m.available()) return ParseStatus::kNeedMore;  // the byte after '\r'
        long long count = 0;
        if (!ParseRedisLongLong(m.in.data() + m.pos + 1, cr - 1, &count) || count > INT_MAX ||
            (count > 0 && static_cast<unsigned long long>(count) > limits_.max_args)) {
          return fail(kErrInvalidMbulk);
        }
        // Redis skips the byte after '\r' without looking at it; hiredis insists on "\r\n".
        // Normalising it keeps both readers on the same line ends.
        m.in[m.pos + cr + 1] = '\n';
        if (count <= 0) {  // "*0", "*-1" (any count <= 0, as Redis): no command
          m.pos += cr + 2;
          m.state = Impl::State::kIdle;
          break;
        }
        m.elements = m.elements_left = count;
        m.cursor = cr + 2;
        m.searched = 0;
        m.state = Impl::State::kBulkLine;
        break;
      }

      case Impl::State::kBulkLine: {
        size_t cr = 0;
        switch (m.FindLine(m.cursor, '\r', &cr)) {
          case Impl::LineStatus::kNeedMore:
            return ParseStatus::kNeedMore;
          case Impl::LineStatus::kTooLong:
            return fail(kErrTooBigBulk);
          case Impl::LineStatus::kFound:
            break;
        }
        if (cr + 2 > m.available()) return ParseStatus::kNeedMore;
        const char* line = m.in.data() + m.pos + m.cursor;
        if (line[0] != '$') {
          // Redis maps CR/LF in error texts to spaces.
          const char got = line[0] == '\r' || line[0] == '\n' ? ' ' : line[0];
          return fail(std::string("ERR Protocol error: expected '$', got '") + got + "'");
        }
        long long len = 0;
        if (!ParseRedisLongLong(line + 1, cr - m.cursor - 1, &len) || len < 0 ||
            static_cast<unsigned long long>(len) > limits_.max_bulk_len) {
          return fail(kErrInvalidBulk);
        }
        // Like Redis and hiredis, the two bytes after the body are taken to be CRLF unchecked.
        const size_t body_end = cr + 2 + static_cast<size_t>(len) + 2;
        if (body_end > kMaxFrameBytes) return fail(kErrInvalidBulk);
        m.in[m.pos + cr + 1] = '\n';  // see kMultibulkLine
        m.cursor = body_end;
        m.state = Impl::State::kBulkBody;
        break;
      }

      case Impl::State::kBulkBody: {
        if (m.available() < m.cursor) return ParseStatus::kNeedMore;
        if (--m.elements_left > 0) {
          m.searched = 0;
          m.state = Impl::State::kBulkLine;
          break;
        }
        // The frame [pos, pos + cursor) is complete and valid: hand exactly it to hiredis.
        const size_t frame_len = m.cursor;
        void* reply = nullptr;
        if (redisReaderFeed(m.reader, m.in.data() + m.pos, frame_len) != REDIS_OK ||
            redisReaderGetReply(m.reader, &reply) != REDIS_OK || reply == nullptr ||
            args_.size() != static_cast<size_t>(m.elements)) {
          // Unreachable unless hiredis runs out of memory or disagrees with the scanner.
          return fail(std::string("ERR Protocol error: ") + redisReaderGetError(m.reader));
        }
        m.pos += frame_len;
        m.state = Impl::State::kIdle;
        return ParseStatus::kCommand;
      }
    }
  }
}

}  // namespace deferq::proto
