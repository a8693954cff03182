// Cron specs and zones (src/schedule): parsing, the civil calendar, and the next occurrence
// across daylight-saving changes in two zones, both directions. tests/scripts/test_cron.py pins
// common/schedule.lua's copy of the search to the same instants.
#include "schedule/cron.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schedule/civil.h"
#include "schedule/zone.h"

namespace deferq::schedule {
namespace {

constexpr const char* kParis = "CET-1CEST,M3.5.0,M10.5.0/3";
constexpr const char* kNewYork = "EST5EDT,M3.2.0,M11.1.0";

// UTC ms of "YYYY-MM-DD HH:MM[:SS]".
int64_t Utc(int y, int mo, int d, int h, int mi, int s = 0) {
  return (DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) * 1000;
}

ZoneRule Zone(const char* posix) {
  ZoneRule z;
  EXPECT_TRUE(ParsePosixTz(posix, &z)) << posix;
  return z;
}

Cron Spec(const char* text) {
  Cron c;
  std::string error;
  EXPECT_TRUE(ParseCron(text, &c, &error)) << text << ": " << error;
  return c;
}

// The n occurrences after `after`.
std::vector<int64_t> Next(const char* spec, const char* zone, int64_t after, int n) {
  const Cron c = Spec(spec);
  const ZoneRule z = Zone(zone);
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    after = NextOccurrence(c, z, after);
    out.push_back(after);
  }
  return out;
}

TEST(Civil, DaysRoundTrip) {
  EXPECT_EQ(DaysFromCivil(1970, 1, 1), 0);
  EXPECT_EQ(DaysFromCivil(2000, 3, 1), 11017);
  for (int64_t z = -800000; z < 800000; z += 997) {
    const CivilDate d = CivilFromDays(z);
    EXPECT_EQ(DaysFromCivil(d.year, d.month, d.day), z);
  }
  EXPECT_EQ(WeekdayOfDays(0), 4);                            // a Thursday
  EXPECT_EQ(WeekdayOfDays(DaysFromCivil(2026, 11, 28)), 6);  // a Saturday
}

TEST(Cron, ParsesFieldsNamesStepsAndAliases) {
  Cron c = Spec("*/15 9-17 * JAN,jul mon-fri");
  EXPECT_EQ(c.minutes, (1ull << 0) | (1ull << 15) | (1ull << 30) | (1ull << 45));
  EXPECT_EQ(c.hours, 0x3fe00u);
  EXPECT_EQ(c.months, (1u << 1) | (1u << 7));
  EXPECT_EQ(c.weekdays, 0x3eu);
  EXPECT_FALSE(c.with_seconds);
  EXPECT_EQ(c.seconds, 1u);
  EXPECT_TRUE(c.days_any);
  EXPECT_FALSE(c.weekdays_any);
  c = Spec("5/20 0 0 1 * 7");
  EXPECT_TRUE(c.with_seconds);
  EXPECT_EQ(c.seconds, (1ull << 5) | (1ull << 25) | (1ull << 45));
  EXPECT_EQ(c.weekdays, 1u);  // 7 is Sunday
  c = Spec("@daily");
  EXPECT_EQ(c.minutes, 1u);
  EXPECT_EQ(c.hours, 1u);
  c = Spec("0 12 ? * 1-5/2");
  EXPECT_EQ(c.weekdays, (1u << 1) | (1u << 3) | (1u << 5));
}

TEST(Cron, RefusesWhatIsNotASpec) {
  for (const char* bad :
       {"", "* * * *", "* * * * * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * 32 * *",
        "* * * 13 *", "* * * * 8", "5-1 * * * *", "*/0 * * * *", "a * * * *", "1,,2 * * * *",
        "* * * foo *", "0 0 30 2 *", "0 0 31 4,6,9,11 *"}) {
    Cron c;
    std::string error;
    EXPECT_FALSE(ParseCron(bad, &c, &error)) << bad;
    EXPECT_EQ(error.rfind("ERR CRON", 0), 0u) << bad;
  }
  Cron c;
  std::string error;
  EXPECT_FALSE(ParseCron(std::string(kMaxCronText + 1, '*'), &c, &error));
  // February 29 exists; the 31st with a weekday to match instead fires on the weekday.
  EXPECT_TRUE(ParseCron("0 0 29 2 *", &c, &error));
  EXPECT_TRUE(ParseCron("0 0 31 2 mon", &c, &error));
}

TEST(Cron, DayOfMonthOrDayOfWeekWhenBothAreRestricted) {
  // 2026-11-01 is a Sunday: "the 13th or any Friday" from there.
  const std::vector<int64_t> got = Next("0 0 13 * fri", "UTC0", Utc(2026, 11, 1, 0, 0), 3);
  EXPECT_EQ(got, (std::vector<int64_t>{Utc(2026, 11, 6, 0, 0), Utc(2026, 11, 13, 0, 0),
                                       Utc(2026, 11, 20, 0, 0)}));
  // A leap day, years ahead.
  EXPECT_EQ(Next("0 0 29 2 *", "UTC0", Utc(2026, 11, 1, 0, 0), 1)[0], Utc(2028, 2, 29, 0, 0));
}

TEST(Zone, ParsesPosixRules) {
  ZoneRule z = Zone(kParis);
  EXPECT_EQ(z.std_off, 3600);
  EXPECT_EQ(z.dst_off, 7200);
  EXPECT_TRUE(z.has_dst);
  EXPECT_EQ(z.end.time_s, 3 * 3600);
  z = Zone("<+0530>-5:30");
  EXPECT_EQ(z.std_off, 5 * 3600 + 1800);
  EXPECT_FALSE(z.has_dst);
  z = Zone("<-03>3<-02>,M3.5.0/-2,M10.5.0/-1");  // America/Nuuk: change times before midnight
  EXPECT_EQ(z.start.time_s, -7200);
  EXPECT_EQ(z.dst_off, -7200);
  for (const char* bad :
       {"", "CE", "CET", "CET-1CEST", "CET-1CEST,M3.5.0", "CET-1CEST,M13.5.0,M10.5.0",
        "CET-1CEST,M3.6.0,M10.5.0", "CET-1CEST,M3.5.7,M10.5.0", "CET-1x"}) {
    ZoneRule r;
    EXPECT_FALSE(ParsePosixTz(bad, &r)) << bad;
  }
}

TEST(Zone, OffsetsAroundTheChanges) {
  const ZoneRule paris = Zone(kParis);
  EXPECT_EQ(OffsetAt(paris, Utc(2026, 3, 29, 0, 59, 59) / 1000), 3600);
  EXPECT_EQ(OffsetAt(paris, Utc(2026, 3, 29, 1, 0) / 1000), 7200);
  EXPECT_EQ(OffsetAt(paris, Utc(2026, 10, 25, 0, 59, 59) / 1000), 7200);
  EXPECT_EQ(OffsetAt(paris, Utc(2026, 10, 25, 1, 0) / 1000), 3600);
  const ZoneRule sydney = Zone("AEST-10AEDT,M10.1.0,M4.1.0/3");  // summer across new year
  EXPECT_EQ(OffsetAt(sydney, Utc(2027, 1, 1, 0, 0) / 1000), 11 * 3600);
  EXPECT_EQ(OffsetAt(sydney, Utc(2026, 7, 1, 0, 0) / 1000), 10 * 3600);
}

TEST(Zone, ReadsTheSystemDatabase) {
  ZoneTable table;
  ASSERT_GT(table.Load("/usr/share/zoneinfo"), 300u) << "tzdata is installed by scripts/bootstrap";
  const ZoneRule* paris = table.Find("Europe/Paris");
  ASSERT_NE(paris, nullptr);
  const ZoneRule want = Zone(kParis);
  EXPECT_EQ(paris->std_off, want.std_off);
  EXPECT_EQ(paris->dst_off, want.dst_off);
  EXPECT_EQ(paris->end.time_s, want.end.time_s);
  ASSERT_NE(table.Find("America/New_York"), nullptr);
  ASSERT_NE(table.Find("UTC"), nullptr);
  EXPECT_EQ(table.Find("posix/Europe/Paris"), nullptr);
  EXPECT_EQ(table.Find("Mars/Base"), nullptr);
  EXPECT_EQ(table.Find("../etc/passwd"), nullptr);
  ZoneRule r;
  EXPECT_FALSE(ZoneTable::RuleOfTzif(std::string(50, 'x'), &r));
  EXPECT_FALSE(ZoneTable::RuleOfTzif("TZif1" + std::string(50, '\0') + "\nUTC0\n", &r));
  EXPECT_TRUE(ZoneTable::RuleOfTzif("TZif2" + std::string(50, '\0') + "\nUTC0\n", &r));
}

// Spring forward in Paris (2026-03-29 02:00 CET -> 03:00 CEST): 02:30 does not exist and fires
// once, at 03:00 CEST (01:00 UTC).
TEST(Occurrence, ParisSpringForward) {
  EXPECT_EQ(Next("30 2 * * *", kParis, Utc(2026, 3, 28, 1, 30), 2),
            (std::vector<int64_t>{Utc(2026, 3, 29, 1, 0), Utc(2026, 3, 30, 0, 30)}));
  // Every half hour: 02:00 and 02:30 both fall on the change, which fires once.
  EXPECT_EQ(Next("*/30 * * * *", kParis, Utc(2026, 3, 29, 0, 30), 2),
            (std::vector<int64_t>{Utc(2026, 3, 29, 1, 0), Utc(2026, 3, 29, 1, 30)}));
  // Hour "*" follows the clock in force: 02:30 is skipped, 03:30 CEST comes as usual.
  EXPECT_EQ(Next("30 * * * *", kParis, Utc(2026, 3, 29, 0, 30), 2),
            (std::vector<int64_t>{Utc(2026, 3, 29, 1, 30), Utc(2026, 3, 29, 2, 30)}));
}

// Fall back in Paris (2026-10-25 03:00 CEST -> 02:00 CET): 02:30 happens twice; a fixed hour
// fires at the first, every hour ("*") in both passes.
TEST(Occurrence, ParisFallBack) {
  EXPECT_EQ(Next("30 2 * * *", kParis, Utc(2026, 10, 24, 0, 30), 2),
            (std::vector<int64_t>{Utc(2026, 10, 25, 0, 30), Utc(2026, 10, 26, 1, 30)}));
  EXPECT_EQ(Next("*/30 * * * *", kParis, Utc(2026, 10, 24, 23, 59), 5),
            (std::vector<int64_t>{Utc(2026, 10, 25, 0, 0), Utc(2026, 10, 25, 0, 30),
                                  Utc(2026, 10, 25, 1, 0), Utc(2026, 10, 25, 1, 30),
                                  Utc(2026, 10, 25, 2, 0)}));
}

// New York: 2026-03-08 02:00 EST -> 03:00 EDT, 2026-11-01 02:00 EDT -> 01:00 EST.
TEST(Occurrence, NewYorkBothWays) {
  EXPECT_EQ(Next("0 2 * * *", kNewYork, Utc(2026, 3, 7, 7, 0), 2),
            (std::vector<int64_t>{Utc(2026, 3, 8, 7, 0), Utc(2026, 3, 9, 6, 0)}));
  EXPECT_EQ(Next("30 1 * * *", kNewYork, Utc(2026, 10, 31, 5, 30), 2),
            (std::vector<int64_t>{Utc(2026, 11, 1, 5, 30), Utc(2026, 11, 2, 6, 30)}));
  // Weekdays at 09:00 local across the spring change: 14:00 UTC before, 13:00 UTC after.
  EXPECT_EQ(Next("0 9 * * 1-5", kNewYork, Utc(2026, 3, 5, 15, 0), 3),
            (std::vector<int64_t>{Utc(2026, 3, 6, 14, 0), Utc(2026, 3, 9, 13, 0),
                                  Utc(2026, 3, 10, 13, 0)}));
}

TEST(Occurrence, SecondsAndStrictlyAfter) {
  EXPECT_EQ(Next("*/2 * * * * *", "UTC0", Utc(2026, 1, 1, 0, 0) + 1, 2),
            (std::vector<int64_t>{Utc(2026, 1, 1, 0, 0, 2), Utc(2026, 1, 1, 0, 0, 4)}));
  EXPECT_EQ(Next("* * * * *", "UTC0", Utc(2026, 1, 1, 0, 0), 1)[0], Utc(2026, 1, 1, 0, 1));
  EXPECT_EQ(Next("* * * * *", "UTC0", Utc(2026, 1, 1, 0, 0) - 1, 1)[0], Utc(2026, 1, 1, 0, 0));
}

}  // namespace
}  // namespace deferq::schedule
