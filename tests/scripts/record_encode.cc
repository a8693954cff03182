// The C++ side of the cross-language record test (test_record_codec.py): reads one job per line,
//   created_ms ttl_s tries every_s backoff_s backoff_max_s jitter(0|1) at_ms payload_hex [zone
//   spec]
// ("-" for an empty payload; a zone and cron spec give the record that schedule), and writes
// queue::EncodeRecord's bytes for it as one hex line; or, for a line
//   next zone after_ms spec
// the occurrence schedule::NextOccurrence finds (the Lua copy of the search is held to it). A job
// line may start with "priority LEVEL" (PUBLISH ... PRIORITY). The
// Python test hands those bytes to common/record.lua's decoder in a real redis-server.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "queue/model/job_codec.h"
#include "schedule/cron.h"
#include "schedule/zone.h"

namespace {

std::string FromHex(const std::string& hex) {
  std::string out;
  if (hex == "-") return out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string ToHex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

// The zones of the system's tz database, read once.
const deferq::schedule::ZoneTable& Zones() {
  static deferq::schedule::ZoneTable* table = [] {
    auto* t = new deferq::schedule::ZoneTable();
    t->Load("/usr/share/zoneinfo");
    return t;
  }();
  return *table;
}

// The rest of the stream as one string, leading blanks skipped.
std::string Rest(std::istringstream& in) {
  std::string rest;
  std::getline(in >> std::ws, rest);
  return rest;
}

// A cron spec in zone `zone`; false (with a line on stderr) when either is refused.
bool Schedule(const std::string& zone, const std::string& spec, deferq::schedule::Cron* cron,
              const deferq::schedule::ZoneRule** rule) {
  std::string error;
  *rule = Zones().Find(zone);
  if (*rule == nullptr || !deferq::schedule::ParseCron(spec, cron, &error)) {
    std::cerr << "bad schedule: " << zone << " " << spec << " " << error << "\n";
    return false;
  }
  return true;
}

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    if (line.rfind("next ", 0) == 0) {
      std::string word, zone;
      int64_t after = 0;
      in >> word >> zone >> after;
      deferq::schedule::Cron cron;
      const deferq::schedule::ZoneRule* rule = nullptr;
      if (!Schedule(zone, Rest(in), &cron, &rule)) return 2;
      std::cout << deferq::schedule::NextOccurrence(cron, *rule, after) << "\n";
      continue;
    }
    deferq::queue::NewJob job;
    std::string payload_hex;
    int jitter = 0;
    if (line.rfind("priority ", 0) == 0) {  // "priority LEVEL" then the usual fields
      std::string word;
      int level = 0;
      in >> word >> level;
      job.priority = static_cast<uint8_t>(level);
    }
    if (!(in >> job.created_ms >> job.ttl_s >> job.tries >> job.every_s >> job.backoff_s >>
          job.backoff_max_s >> jitter >> job.at_ms >> payload_hex)) {
      std::cerr << "bad line: " << line << "\n";
      return 2;
    }
    job.backoff_jitter = jitter != 0;
    const std::string payload = FromHex(payload_hex);
    job.payload = payload;
    // Optionally a zone and a cron spec: the record carries that schedule (PUBLISH ... CRON).
    std::string zone, block;
    if (in >> zone) {
      deferq::schedule::Cron cron;
      const deferq::schedule::ZoneRule* rule = nullptr;
      const std::string spec = Rest(in);
      if (!Schedule(zone, spec, &cron, &rule)) return 2;
      block = deferq::schedule::EncodeSchedule(cron, *rule, spec, zone);
      job.schedule = block;
    }
    std::cout << ToHex(deferq::queue::EncodeRecord(job)) << "\n";
  }
  return 0;
}
