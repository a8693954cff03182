// The C++ side of the cross-language record test (test_record_codec.py): reads one job per line,
//   created_ms ttl_s tries every_s backoff_s backoff_max_s jitter(0|1) at_ms payload_hex
// ("-" for an empty payload), and writes queue::EncodeRecord's bytes for it as one hex line. The
// Python test hands those bytes to common.lua's decoder in a real redis-server.
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include "queue/job_codec.h"

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

}  // namespace

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    deferq::queue::NewJob job;
    std::string payload_hex;
    int jitter = 0;
    if (!(in >> job.created_ms >> job.ttl_s >> job.tries >> job.every_s >> job.backoff_s >>
          job.backoff_max_s >> jitter >> job.at_ms >> payload_hex)) {
      std::cerr << "bad line: " << line << "\n";
      return 2;
    }
    job.backoff_jitter = jitter != 0;
    const std::string payload = FromHex(payload_hex);
    job.payload = payload;
    std::cout << ToHex(deferq::queue::EncodeRecord(job)) << "\n";
  }
  return 0;
}
