#include "schedule/zone.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "schedule/civil.h"

namespace deferq::schedule {

namespace {

// A POSIX TZ string being read.
struct Cursor {
  std::string_view s;
  size_t i = 0;
  bool done() const { return i >= s.size(); }
  char peek() const { return done() ? '\0' : s[i]; }
  bool eat(char c) {
    if (peek() != c) return false;
    ++i;
    return true;
  }
};

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// A zone abbreviation: three or more letters, or <...> of letters, digits, '+' and '-'.
bool ReadName(Cursor* c) {
  if (c->eat('<')) {
    size_t n = 0;
    while (!c->done() && c->peek() != '>') {
      const char ch = c->peek();
      if (!IsAlpha(ch) && !IsDigit(ch) && ch != '+' && ch != '-') return false;
      ++c->i;
      ++n;
    }
    return c->eat('>') && n >= 3;
  }
  size_t n = 0;
  while (IsAlpha(c->peek())) {
    ++c->i;
    ++n;
  }
  return n >= 3;
}

bool ReadNumber(Cursor* c, int max, int* out) {
  if (!IsDigit(c->peek())) return false;
  int v = 0;
  while (IsDigit(c->peek())) {
    v = v * 10 + (c->peek() - '0');
    if (v > max) return false;
    ++c->i;
  }
  *out = v;
  return true;
}

// [+-]hh[:mm[:ss]], hours up to max_h; in seconds.
bool ReadTime(Cursor* c, int max_h, int32_t* out) {
  int sign = 1;
  if (c->eat('-')) {
    sign = -1;
  } else {
    c->eat('+');
  }
  int h = 0, m = 0, s = 0;
  if (!ReadNumber(c, max_h, &h)) return false;
  if (c->eat(':')) {
    if (!ReadNumber(c, 59, &m)) return false;
    if (c->eat(':') && !ReadNumber(c, 59, &s)) return false;
  }
  *out = sign * (h * 3600 + m * 60 + s);
  return true;
}

bool ReadChange(Cursor* c, ZoneChange* out) {
  int a = 0, b = 0, d = 0;
  if (c->eat('M')) {
    if (!ReadNumber(c, 12, &a) || a < 1 || !c->eat('.') || !ReadNumber(c, 5, &b) || b < 1 ||
        !c->eat('.') || !ReadNumber(c, 6, &d)) {
      return false;
    }
    out->kind = ZoneChange::kMonthWeekDay;
    out->month = static_cast<uint8_t>(a);
    out->week = static_cast<uint8_t>(b);
    out->wday = static_cast<uint8_t>(d);
  } else if (c->eat('J')) {
    if (!ReadNumber(c, 365, &a) || a < 1) return false;
    out->kind = ZoneChange::kJulian1;
    out->day = static_cast<uint16_t>(a);
  } else {
    if (!ReadNumber(c, 365, &a)) return false;
    out->kind = ZoneChange::kJulian0;
    out->day = static_cast<uint16_t>(a);
  }
  out->time_s = 7200;
  if (c->eat('/') && !ReadTime(c, 167, &out->time_s)) return false;
  return true;
}

}  // namespace

bool ParsePosixTz(std::string_view text, ZoneRule* out) {
  Cursor c{text};
  ZoneRule z;
  int32_t west = 0;
  if (!ReadName(&c) || !ReadTime(&c, 24, &west)) return false;
  z.std_off = z.dst_off = -west;
  if (!c.done()) {
    if (!ReadName(&c)) return false;
    z.has_dst = true;
    z.dst_off = z.std_off + 3600;
    if (c.peek() != ',') {
      if (!ReadTime(&c, 24, &west)) return false;
      z.dst_off = -west;
    }
    // No rule after the names: POSIX leaves the changes to the implementation; refuse.
    if (!c.eat(',') || !ReadChange(&c, &z.start) || !c.eat(',') || !ReadChange(&c, &z.end)) {
      return false;
    }
    if (!c.done()) return false;
    // "Daylight saving all year" (e.g. "EST5EDT,0/0,J365/25") acts as a fixed offset.
  }
  *out = z;
  return true;
}

int64_t ChangeAt(const ZoneChange& change, int64_t year, int32_t before_off) {
  int64_t day = 0;  // days since 1970 of the change's date
  switch (change.kind) {
    case ZoneChange::kMonthWeekDay: {
      const int64_t first = DaysFromCivil(year, change.month, 1);
      int d = 1 + (change.wday - WeekdayOfDays(first) + 7) % 7 + (change.week - 1) * 7;
      while (d > DaysInMonth(year, change.month)) d -= 7;
      day = first + d - 1;
      break;
    }
    case ZoneChange::kJulian1:
      day = DaysFromCivil(year, 1, 1) + change.day - 1 +
            (IsLeapYear(year) && change.day >= 60 ? 1 : 0);
      break;
    case ZoneChange::kJulian0:
      day = DaysFromCivil(year, 1, 1) + change.day;
      break;
  }
  return day * 86400 + change.time_s - before_off;
}

int32_t OffsetAt(const ZoneRule& zone, int64_t t) {
  if (!zone.has_dst) return zone.std_off;
  const int64_t year = CivilFromDays(FloorDiv(t + zone.std_off, 86400)).year;
  const int64_t start = ChangeAt(zone.start, year, zone.std_off);
  const int64_t end = ChangeAt(zone.end, year, zone.dst_off);
  const bool dst = start < end ? (t >= start && t < end) : !(t >= end && t < start);
  return dst ? zone.dst_off : zone.std_off;
}

ZoneTable::ZoneTable() { zones_.emplace("UTC", ZoneRule{}); }

bool ZoneTable::RuleOfTzif(std::string_view s, ZoneRule* out) {
  // Version 2+ files end with "\n" rule "\n" after the second (64-bit) data block.
  if (s.size() < 44 || s.substr(0, 4) != "TZif" || s[4] < '2' || s.back() != '\n') return false;
  const size_t open = s.rfind('\n', s.size() - 2);
  if (open == std::string_view::npos) return false;
  const std::string_view rule = s.substr(open + 1, s.size() - open - 2);
  return !rule.empty() && ParsePosixTz(rule, out);
}

size_t ZoneTable::Load(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path root(dir);
  fs::recursive_directory_iterator it(root, fs::directory_options::follow_directory_symlink, ec);
  if (ec) return 0;
  size_t n = 0;
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const fs::path rel = it->path().lexically_relative(root);
    const std::string name = rel.generic_string();
    if (it->is_directory(ec)) {
      // The posix/ and right/ trees repeat every zone (right/ with leap seconds).
      if (name == "posix" || name == "right") it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file(ec) || it->file_size(ec) > (1 << 20)) continue;
    std::ifstream f(it->path(), std::ios::binary);
    const std::string contents((std::istreambuf_iterator<char>(f)), {});
    ZoneRule rule;
    if (!RuleOfTzif(contents, &rule)) continue;
    zones_[name] = rule;
    ++n;
  }
  return n;
}

const ZoneRule* ZoneTable::Find(std::string_view name) const {
  auto it = zones_.find(name);
  return it == zones_.end() ? nullptr : &it->second;
}

namespace {
ZoneTable& MutableSystemZones() {
  static ZoneTable table;
  return table;
}
}  // namespace

const ZoneTable& SystemZones() { return MutableSystemZones(); }

size_t LoadSystemZones() {
  const char* dir = std::getenv("TZDIR");
  return MutableSystemZones().Load(dir != nullptr && *dir != '\0' ? dir : "/usr/share/zoneinfo");
}

}  // namespace deferq::schedule
