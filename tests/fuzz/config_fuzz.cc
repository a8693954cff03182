// Fuzz target: the configuration loader (src/config/load.cc): TOML text, the cross-key checks, and
// the command line.
//
// Input: TOML text. It is loaded on top of the defaults; when it loads, the result is validated,
// and a configuration that passes must give the job commands sane values (a CONSUME without
// TIMEOUT, a PUBLISH with the longest DELAY: see job_requests_fuzz.cc for the ranges). The same
// text, split into lines, is also given to the command-line parser as argv (without --config,
// which would read a file). Checked: a refused input has an error naming the source and a line;
// nothing throws out of the loader; an accepted one satisfies the invariants.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "config/load.h"
#include "fuzz/job_parse_context.h"
#include "queue/commands/job_requests.h"

namespace {

using namespace deferq;

constexpr int64_t kCenturyS = 100LL * 365 * 86400;

void CheckUsable(const Config& cfg) {
  DQ_CHECK(cfg.max_bulk_len >= cfg.max_payload + 1024);
  queue::JobParseContext parse(cfg);
  const std::string_view consume[] = {"CONSUME", "q"};
  queue::ConsumeRequest c;
  DQ_CHECK(queue::ParseConsume(parse.ctx(), consume, &c));
  DQ_CHECK_MSG(std::isfinite(c.timeout_s) && c.timeout_s >= 0 && c.timeout_s <= kCenturyS,
               "default timeout %g", c.timeout_s);
  const std::string delay = std::to_string(kCenturyS);
  const std::string_view publish[] = {"PUBLISH", "q", "p", "DELAY", delay};
  queue::PublishRequest p;
  if (queue::ParsePublish(parse.ctx(), publish, &p)) {
    DQ_CHECK_MSG(p.ttl_s <= std::numeric_limits<uint32_t>::max(), "stretched ttl %lld",
                 static_cast<long long>(p.ttl_s));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Config cfg;
  std::string error;
  if (LoadConfigString(text, "fuzz.toml", &cfg, &error)) {
    if (ValidateConfig(cfg, &error)) CheckUsable(cfg);
  } else {
    DQ_CHECK_MSG(error.starts_with("fuzz.toml:") || error.starts_with("internal error"),
                 "error without its source: %s", error.c_str());
  }

  // The command line: one argument per line, program name first.
  std::vector<std::string> words = {"deferq"};
  for (size_t start = 0; start < text.size() && words.size() < 32;) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    words.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  for (const std::string& w : words) {
    if (w.starts_with("--config") || w == "-c") return 0;
  }
  std::vector<const char*> argv;
  for (const std::string& w : words) argv.push_back(w.c_str());
  Config cli;
  CliAction action = CliAction::kRun;
  if (ParseCommandLine(static_cast<int>(argv.size()), argv.data(), &cli, &action, &error) &&
      action == CliAction::kRun) {
    CheckUsable(cli);
  }
  return 0;
}
