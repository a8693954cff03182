// Time zones for schedules: the rule a zone follows now, as the POSIX TZ string that ends each
// TZif file of the system's tz database ("CET-1CEST,M3.5.0,M10.5.0/3"), and the UTC offset it
// gives at an instant. Past rule changes are not kept: a schedule only looks forward. A zone
// whose future follows no yearly rule (its TZif file ends with an empty string) is not offered.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace deferq::schedule {

// One of the two yearly changes of a POSIX TZ rule: "Mm.w.d" (day d, 0 = Sunday, of week w,
// 5 = last, of month m), "Jn" (day n of 1..365, February 29 never counted) or "n" (day n of
// 0..365), at time_s seconds of local wall time (before the change; may be negative or past 24 h).
struct ZoneChange {
  enum Kind : uint8_t { kMonthWeekDay = 0, kJulian1 = 1, kJulian0 = 2 };
  Kind kind = kMonthWeekDay;
  uint8_t month = 0, week = 0, wday = 0;
  uint16_t day = 0;
  int32_t time_s = 7200;
};

struct ZoneRule {
  int32_t std_off = 0;  // seconds east of UTC (local = UTC + offset)
  int32_t dst_off = 0;  // the daylight-saving offset; equal to std_off without one
  bool has_dst = false;
  ZoneChange start, end;  // into daylight saving time, and out of it
};

// Parses a POSIX TZ rule string; false (out untouched) when it is not one or names daylight
// saving time without the rule for it.
bool ParsePosixTz(std::string_view text, ZoneRule* out);

// The UTC second at which `change` happens in `year`, for a zone whose offset before it is
// `before_off`.
int64_t ChangeAt(const ZoneChange& change, int64_t year, int32_t before_off);

// The zone's offset at UTC second t.
int32_t OffsetAt(const ZoneRule& zone, int64_t t);

// The zones of a tz database directory (TZDIR, default /usr/share/zoneinfo), read once at
// startup, before any event loop runs: a PUBLISH never reads a file. "UTC" is always there.
class ZoneTable {
 public:
  ZoneTable();
  // Reads every TZif file under dir (not the posix/ and right/ copies); returns how many zones.
  size_t Load(const std::string& dir);
  // The zone called `name` ("Europe/Paris"), or nullptr.
  const ZoneRule* Find(std::string_view name) const;
  // The rule of one TZif file's contents; false if it is not a TZif v2+ file with a rule.
  static bool RuleOfTzif(std::string_view contents, ZoneRule* out);

 private:
  std::map<std::string, ZoneRule, std::less<>> zones_;
};

// The process's zones: loaded by LoadSystemZones (main, at startup), read only after that.
const ZoneTable& SystemZones();
size_t LoadSystemZones();

}  // namespace deferq::schedule
