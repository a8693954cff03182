#include "net/metrics_text.h"

#include <gtest/gtest.h>

#include <vector>

namespace deferq::net {
namespace {

TEST(MetricsTextTest, FamilyWritesHelpAndType) {
  std::string out;
  MetricsText m(&out);
  m.Family("deferq_x_total", "counter", "Things.");
  m.Sample("deferq_x_total", {}, uint64_t{3});
  EXPECT_EQ(out,
            "# HELP deferq_x_total Things.\n# TYPE deferq_x_total counter\ndeferq_x_total 3\n");
}

TEST(MetricsTextTest, LabelValuesEscapeBackslashQuoteAndNewline) {
  std::string out;
  MetricsText m(&out);
  m.Sample("m", {{"queue", "a\\b\"c\nd"}, {"ns", "default"}}, uint64_t{1});
  EXPECT_EQ(out, "m{queue=\"a\\\\b\\\"c\\nd\",ns=\"default\"} 1\n");
}

TEST(MetricsTextTest, HistogramIsCumulativeWithInfSumAndCount) {
  std::string out;
  MetricsText m(&out);
  const int64_t bounds[] = {1, 2, 50};
  const std::vector<uint64_t> counts = {4, 1, 0, 2};
  m.Histogram("h_seconds", {{"queue", "q"}}, bounds, 1e-3, counts, 0.25);
  EXPECT_EQ(out,
            "h_seconds_bucket{queue=\"q\",le=\"0.001\"} 4\n"
            "h_seconds_bucket{queue=\"q\",le=\"0.002\"} 5\n"
            "h_seconds_bucket{queue=\"q\",le=\"0.05\"} 5\n"
            "h_seconds_bucket{queue=\"q\",le=\"+Inf\"} 7\n"
            "h_seconds_sum{queue=\"q\"} 0.25\n"
            "h_seconds_count{queue=\"q\"} 7\n");
}

TEST(MetricsTextTest, MicrosecondBoundsPrintShort) {
  std::string out;
  MetricsText m(&out);
  const int64_t bounds[] = {50, 250};
  const std::vector<uint64_t> counts = {0, 0, 0};
  m.Histogram("d", {}, bounds, 1e-6, counts, 0.0);
  EXPECT_NE(out.find("le=\"5e-05\""), std::string::npos) << out;
  EXPECT_NE(out.find("le=\"0.00025\""), std::string::npos) << out;
}

}  // namespace
}  // namespace deferq::net
