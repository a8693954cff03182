#include "schedule/cron.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "schedule/civil.h"

namespace deferq::schedule {

namespace {

struct FieldRange {
  int lo, hi;
  const char* const* names;  // names[0] is the value lo's name, or nullptr
};

constexpr const char* kMonthNames[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                       "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr const char* kDayNames[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool ParseValue(std::string_view s, const FieldRange& f, int* out) {
  if (s.empty()) return false;
  if (f.names != nullptr && s.size() == 3 && !(s[0] >= '0' && s[0] <= '9')) {
    const int count = f.names == kMonthNames ? 12 : 7;
    for (int i = 0; i < count; ++i) {
      const char* n = f.names[i];
      if (Lower(s[0]) == n[0] && Lower(s[1]) == n[1] && Lower(s[2]) == n[2]) {
        *out = (f.names == kMonthNames ? 1 : 0) + i;
        return true;
      }
    }
    return false;
  }
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
    if (v > 99) return false;
  }
  if (v < f.lo || v > f.hi) return false;
  *out = v;
  return true;
}

// One field into a bit mask over lo..hi; *any: the field is "*" or "?" as a whole.
bool ParseField(std::string_view text, const FieldRange& f, uint64_t* mask, bool* any) {
  *mask = 0;
  *any = text == "*" || text == "?";
  while (true) {
    const size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    int step = 1;
    const size_t slash = item.find('/');
    if (slash != std::string_view::npos) {
      if (!ParseValue(item.substr(slash + 1), {1, f.hi - f.lo + 1, nullptr}, &step)) return false;
      item = item.substr(0, slash);
    }
    int lo = f.lo, hi = f.hi;
    if (item != "*" && item != "?") {
      const size_t dash = item.find('-');
      if (!ParseValue(item.substr(0, dash), f, &lo)) return false;
      hi = slash != std::string_view::npos ? f.hi : lo;  // "n/step": from n to the field's end
      if (dash != std::string_view::npos && !ParseValue(item.substr(dash + 1), f, &hi)) {
        return false;
      }
      if (hi < lo) return false;
    }
    for (int v = lo; v <= hi; v += step) *mask |= uint64_t{1} << v;
    if (comma == std::string_view::npos) return true;
    text = text.substr(comma + 1);
  }
}

std::string_view Alias(std::string_view text) {
  struct A {
    std::string_view name, spec;
  };
  static constexpr A kAliases[] = {{"@yearly", "0 0 1 1 *"},  {"@annually", "0 0 1 1 *"},
                                   {"@monthly", "0 0 1 * *"}, {"@weekly", "0 0 * * 0"},
                                   {"@daily", "0 0 * * *"},   {"@midnight", "0 0 * * *"},
                                   {"@hourly", "0 * * * *"}};
  for (const A& a : kAliases) {
    if (text.size() == a.name.size()) {
      bool same = true;
      for (size_t i = 0; i < text.size(); ++i) same = same && Lower(text[i]) == a.name[i];
      if (same) return a.spec;
    }
  }
  return text;
}

bool DayMatches(const Cron& cron, int64_t days) {
  const CivilDate d = CivilFromDays(days);
  const bool dom = (cron.days >> d.day) & 1;
  const bool dow = (cron.weekdays >> WeekdayOfDays(days)) & 1;
  if (!cron.days_any && !cron.weekdays_any) return dom || dow;
  return dom && dow;
}

void Put(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void PutChange(std::string* out, const ZoneChange& c) {
  Put(out, c.kind, 1);
  Put(out, c.month, 1);
  Put(out, c.week, 1);
  Put(out, c.wday, 1);
  Put(out, c.day, 2);
  Put(out, static_cast<uint32_t>(c.time_s), 4);
}

}  // namespace

bool ParseCron(std::string_view text, Cron* out, std::string* error) {
  *error = "ERR CRON wants 5 or 6 fields: [second] minute hour day-of-month month day-of-week";
  if (text.size() > kMaxCronText) return false;
  text = Alias(text);
  std::vector<std::string_view> fields;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    const size_t start = i;
    while (i < text.size() && text[i] != ' ') ++i;
    if (i > start) fields.push_back(text.substr(start, i - start));
  }
  if (fields.size() != 5 && fields.size() != 6) return false;
  Cron c;
  c.with_seconds = fields.size() == 6;
  const size_t f0 = c.with_seconds ? 1 : 0;
  uint64_t m = 0;
  bool any = false;
  *error = "ERR CRON field out of range or malformed";
  if (c.with_seconds) {
    if (!ParseField(fields[0], {0, 59, nullptr}, &c.seconds, &any)) return false;
  }
  if (!ParseField(fields[f0], {0, 59, nullptr}, &c.minutes, &any)) return false;
  if (!ParseField(fields[f0 + 1], {0, 23, nullptr}, &m, &any)) return false;
  c.hours = static_cast<uint32_t>(m);
  if (!ParseField(fields[f0 + 2], {1, 31, nullptr}, &m, &c.days_any)) return false;
  c.days = static_cast<uint32_t>(m);
  if (!ParseField(fields[f0 + 3], {1, 12, kMonthNames}, &m, &any)) return false;
  c.months = static_cast<uint16_t>(m);
  if (!ParseField(fields[f0 + 4], {0, 7, kDayNames}, &m, &c.weekdays_any)) return false;
  if (m & (1u << 7)) m = (m | 1) & 0x7f;  // 7 is Sunday
  c.weekdays = static_cast<uint8_t>(m);
  // A day-of-month that no chosen month has (and no weekday to match instead) never fires.
  if (c.weekdays_any || c.days_any) {
    bool possible = false;
    for (int month = 1; month <= 12; ++month) {
      if (!((c.months >> month) & 1)) continue;
      const uint32_t upto = DaysInMonth(2000, month);  // a leap year: February 29 exists
      possible = possible || (c.days & ((uint64_t{2} << upto) - 2)) != 0;
    }
    if (!possible) {
      *error = "ERR CRON never fires: no chosen month has that day";
      return false;
    }
  }
  *out = c;
  error->clear();
  return true;
}

bool CronMatches(const Cron& cron, int64_t c) {
  const int64_t days = FloorDiv(c, 86400);
  const int64_t sod = c - days * 86400;
  const CivilDate d = CivilFromDays(days);
  return ((cron.months >> d.month) & 1) && DayMatches(cron, days) &&
         ((cron.hours >> (sod / 3600)) & 1) && ((cron.minutes >> (sod / 60 % 60)) & 1) &&
         ((cron.seconds >> (sod % 60)) & 1);
}

int64_t NextCivil(const Cron& cron, int64_t c) {
  int64_t s = cron.with_seconds ? c + 1 : (FloorDiv(c, 60) + 1) * 60;
  // Whole months, days, hours and minutes are skipped at once: a leap day is at most 8 years
  // away (~400 steps); the bound only stops a spec that cannot match.
  for (int step = 0; step < 20000; ++step) {
    const int64_t days = FloorDiv(s, 86400);
    const int64_t sod = s - days * 86400;
    const CivilDate d = CivilFromDays(days);
    if (!((cron.months >> d.month) & 1)) {
      const bool dec = d.month == 12;
      s = DaysFromCivil(d.year + dec, dec ? 1 : d.month + 1, 1) * 86400;
      continue;
    }
    if (!DayMatches(cron, days)) {
      s = (days + 1) * 86400;
      continue;
    }
    const int64_t h = sod / 3600, m = sod / 60 % 60, sec = sod % 60;
    if (!((cron.hours >> h) & 1)) {
      s = days * 86400 + (h + 1) * 3600;
      continue;
    }
    if (!((cron.minutes >> m) & 1)) {
      s = days * 86400 + h * 3600 + (m + 1) * 60;
      continue;
    }
    if (!((cron.seconds >> sec) & 1)) {
      ++s;
      continue;
    }
    return s;
  }
  return -1;
}

namespace {

// The first change of the zone's offset after UTC second u.
int64_t NextChange(const ZoneRule& zone, int64_t u) {
  const int64_t year = CivilFromDays(FloorDiv(u + zone.std_off, 86400)).year;
  int64_t best = INT64_MAX;
  for (int64_t y = year - 1; y <= year + 1; ++y) {
    for (int64_t at :
         {ChangeAt(zone.start, y, zone.std_off), ChangeAt(zone.end, y, zone.dst_off)}) {
      if (at > u && at < best) best = at;
    }
  }
  return best;
}

// Hour "*": the wall clock of whichever offset is in force, so the repeated hour fires in both
// passes and the skipped one not at all. Per offset, the first match after t that the offset
// is in force at; the earlier of the two.
int64_t NextByEitherOffset(const Cron& cron, const ZoneRule& zone, int64_t t) {
  int64_t best = -1;
  for (const int32_t off : {zone.std_off, zone.dst_off}) {
    int64_t u = t;
    for (int step = 0; step < 8; ++step) {
      const int64_t c = NextCivil(cron, u + off);
      if (c < 0) break;
      if (OffsetAt(zone, c - off) == off) {
        if (best < 0 || c - off < best) best = c - off;
        break;
      }
      u = NextChange(zone, c - off) - 1;  // from where this offset is in force again
    }
  }
  return best;
}

}  // namespace

int64_t NextOccurrence(const Cron& cron, const ZoneRule& zone, int64_t after_ms) {
  const int64_t t = FloorDiv(after_ms, 1000);  // an occurrence u must have u > t
  if (cron.hours == 0xffffff && zone.has_dst) {
    const int64_t u = NextByEitherOffset(cron, zone, t);
    return u < 0 ? -1 : u * 1000;
  }
  int64_t c = t + OffsetAt(zone, t);
  for (int step = 0; step < 4000; ++step) {
    c = NextCivil(cron, c);
    if (c < 0) return -1;
    // The instants whose wall clock reads c: one, two (the repeated hour) or none (skipped).
    const int64_t a = c - zone.std_off, b = c - zone.dst_off;
    const bool a_ok = OffsetAt(zone, a) == zone.std_off;
    const bool b_ok = zone.has_dst && OffsetAt(zone, b) == zone.dst_off;
    int64_t first = -1;
    if (a_ok && b_ok) {
      first = std::min(a, b);  // the repeated hour: its first pass
    } else if (a_ok || b_ok) {
      first = a_ok ? a : b;
    } else {
      // Skipped: the first instant after the change, found between the two readings.
      int64_t lo = std::min(a, b), hi = std::max(a, b);
      const int32_t lo_off = OffsetAt(zone, lo);
      while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (OffsetAt(zone, mid) == lo_off ? lo : hi) = mid;
      }
      first = hi;
    }
    if (first > t) return first * 1000;
  }
  return -1;
}

std::string EncodeSchedule(const Cron& cron, const ZoneRule& zone, std::string_view text,
                           std::string_view zone_name) {
  std::string out;
  const uint8_t flags = (cron.with_seconds ? 1 : 0) | (cron.days_any ? 2 : 0) |
                        (cron.weekdays_any ? 4 : 0) | (zone.has_dst ? 8 : 0);
  Put(&out, flags, 1);
  Put(&out, cron.seconds & 0xffffffffu, 4);
  Put(&out, cron.seconds >> 32, 4);
  Put(&out, cron.minutes & 0xffffffffu, 4);
  Put(&out, cron.minutes >> 32, 4);
  Put(&out, cron.hours, 4);
  Put(&out, cron.days, 4);
  Put(&out, cron.months, 2);
  Put(&out, cron.weekdays, 1);
  Put(&out, static_cast<uint32_t>(zone.std_off), 4);
  Put(&out, static_cast<uint32_t>(zone.dst_off), 4);
  // A zone without daylight saving time has no changes: zeros, whatever the parser left.
  const ZoneChange none{ZoneChange::kMonthWeekDay, 0, 0, 0, 0, 0};
  PutChange(&out, zone.has_dst ? zone.start : none);
  PutChange(&out, zone.has_dst ? zone.end : none);
  Put(&out, text.size(), 1);
  out.append(text);
  Put(&out, zone_name.size(), 1);
  out.append(zone_name);
  return out;
}

}  // namespace deferq::schedule
