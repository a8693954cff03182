// Cron schedules (PUBLISH ... CRON "<fields>" [TZ zone]): the five fields of crontab(5) -- minute
// hour day-of-month month day-of-week -- or six with seconds first, and when the next occurrence
// after an instant is in a zone. The storage scripts reschedule a recurring job themselves, so
// common/schedule.lua holds the same search (cron_next) on the block EncodeSchedule writes; both
// are pinned to the same daylight-saving cases (tests/unit/schedule, tests/scripts/test_cron.py).
//
// Rules (docs/commands.md CRON):
//  - a field is a list of items "*", "n", "a-b", each optionally "/step"; "n/step" runs from n to
//    the field's end; months and weekdays may be names (JAN, MON); weekday 7 is Sunday; "?" is
//    "*"; @yearly @monthly @weekly @daily @hourly name the usual specs;
//  - day-of-month and day-of-week both restricted: a day matching either (crontab(5));
//  - a local time that does not exist (the hour skipped in spring) fires once, at the first
//    instant after the change; a local time that happens twice (the hour repeated in autumn) fires
//    once, at its first instance;
//  - except with the hour field "*" (a job that runs at intervals, as cron treats it): that one
//    follows the wall clock of whichever offset is in force, so the skipped hour's times do not
//    fire and the repeated hour's fire in both passes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "schedule/zone.h"

namespace deferq::schedule {

struct Cron {
  uint64_t seconds = 1;  // bit s: second s matches (five fields: second 0 only)
  uint64_t minutes = 0;
  uint32_t hours = 0;
  uint32_t days = 0;     // bit d for day d of the month, 1..31
  uint16_t months = 0;   // bit m, 1..12
  uint8_t weekdays = 0;  // bit d, 0 = Sunday
  bool with_seconds = false;
  bool days_any = true;      // day-of-month field is "*" (or "?")
  bool weekdays_any = true;  // day-of-week field is "*" (or "?")
};

inline constexpr size_t kMaxCronText = 128;

// Parses a cron spec; false with a reason in *error ("ERR CRON ...") when it is not one or never
// fires (e.g. "0 0 31 2 *").
bool ParseCron(std::string_view text, Cron* out, std::string* error);

// Whether civil (local wall-clock) second c matches; c counts seconds since 1970-01-01 00:00 of
// the local calendar.
bool CronMatches(const Cron& cron, int64_t c);
// The first matching civil second after c; -1 when none within years.
int64_t NextCivil(const Cron& cron, int64_t c);

// The first occurrence, in UTC ms, strictly after after_ms; -1 when none.
int64_t NextOccurrence(const Cron& cron, const ZoneRule& zone, int64_t after_ms);

// The schedule block stored in a recurring job's record (docs/storage.md, common/schedule.lua
// decode_schedule): the fields as bit masks, the zone's rule, and the spec and zone name as
// given, for JOB.
std::string EncodeSchedule(const Cron& cron, const ZoneRule& zone, std::string_view text,
                           std::string_view zone_name);

}  // namespace deferq::schedule
