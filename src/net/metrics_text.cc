#include "net/metrics_text.h"

#include <cinttypes>
#include <cstdio>

namespace deferq::net {

namespace {

void AppendDouble(std::string* out, double v) {
  char buf[32];
  // 15 significant digits: exact for counts and sums of µs, and 50e-6 prints as 5e-05.
  const int n = snprintf(buf, sizeof(buf), "%.15g", v);
  out->append(buf, static_cast<size_t>(n));
}

void AppendU64(std::string* out, uint64_t v) {
  char buf[24];
  const int n = snprintf(buf, sizeof(buf), "%" PRIu64, v);
  out->append(buf, static_cast<size_t>(n));
}

}  // namespace

void MetricsText::AppendEscaped(std::string* out, std::string_view value) {
  for (char c : value) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '"') {
      out->append("\\\"");
    } else if (c == '\n') {
      out->append("\\n");
    } else {
      out->push_back(c);
    }
  }
}

void MetricsText::Family(std::string_view name, std::string_view type, std::string_view help) {
  out_->append("# HELP ").append(name).append(" ").append(help).append("\n");
  out_->append("# TYPE ").append(name).append(" ").append(type).append("\n");
}

void MetricsText::Labels(std::initializer_list<Label> labels, std::string_view le) {
  if (labels.size() == 0 && le.empty()) return;
  out_->push_back('{');
  bool first = true;
  for (const Label& l : labels) {
    if (!first) out_->push_back(',');
    first = false;
    out_->append(l.first).append("=\"");
    AppendEscaped(out_, l.second);
    out_->push_back('"');
  }
  if (!le.empty()) {
    if (!first) out_->push_back(',');
    out_->append("le=\"").append(le).append("\"");
  }
  out_->push_back('}');
}

void MetricsText::Sample(std::string_view name, std::initializer_list<Label> labels, double value) {
  out_->append(name);
  Labels(labels, {});
  out_->push_back(' ');
  AppendDouble(out_, value);
  out_->push_back('\n');
}

void MetricsText::Sample(std::string_view name, std::initializer_list<Label> labels,
                         uint64_t value) {
  out_->append(name);
  Labels(labels, {});
  out_->push_back(' ');
  AppendU64(out_, value);
  out_->push_back('\n');
}

void MetricsText::Histogram(std::string_view name, std::initializer_list<Label> labels,
                            std::span<const int64_t> bounds, double scale,
                            std::span<const uint64_t> counts, double sum) {
  uint64_t cumulative = 0;
  char le[32];
  for (size_t i = 0; i <= bounds.size() && i < counts.size(); ++i) {
    cumulative += counts[i];
    if (i < bounds.size()) {
      snprintf(le, sizeof(le), "%.15g", static_cast<double>(bounds[i]) * scale);
    } else {
      snprintf(le, sizeof(le), "+Inf");
    }
    out_->append(name).append("_bucket");
    Labels(labels, le);
    out_->push_back(' ');
    AppendU64(out_, cumulative);
    out_->push_back('\n');
  }
  out_->append(name).append("_sum");
  Labels(labels, {});
  out_->push_back(' ');
  AppendDouble(out_, sum);
  out_->push_back('\n');
  out_->append(name).append("_count");
  Labels(labels, {});
  out_->push_back(' ');
  AppendU64(out_, cumulative);
  out_->push_back('\n');
}

}  // namespace deferq::net
