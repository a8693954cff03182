// Writes the Prometheus text exposition format 0.0.4: one HELP and one TYPE line per family,
// samples with escaped label values, histograms as cumulative _bucket lines plus _sum and _count.
// Knows nothing of deferq; metrics_exporter.cc decides what is written.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace deferq::net {

using Label = std::pair<std::string_view, std::string_view>;

class MetricsText {
 public:
  explicit MetricsText(std::string* out) : out_(out) {}

  // Starts a family; type is "counter", "gauge" or "histogram".
  void Family(std::string_view name, std::string_view type, std::string_view help);
  void Sample(std::string_view name, std::initializer_list<Label> labels, double value);
  void Sample(std::string_view name, std::initializer_list<Label> labels, uint64_t value);
  // A histogram from per-bucket (not cumulative) counts: counts.size() == bounds.size() + 1, the
  // last one being +Inf. bounds are in units of `scale` (1e-6 for µs bounds in seconds).
  void Histogram(std::string_view name, std::initializer_list<Label> labels,
                 std::span<const int64_t> bounds, double scale, std::span<const uint64_t> counts,
                 double sum);

  // Label value escaping of the text format: backslash, double quote and newline.
  static void AppendEscaped(std::string* out, std::string_view value);

 private:
  void Labels(std::initializer_list<Label> labels, std::string_view le);
  std::string* out_;
};

}  // namespace deferq::net
