#include "net/clients_query.h"

#include <algorithm>

namespace deferq::net {

queue::ClientsReport ClientsFanout::Merge(const std::vector<queue::ClientsReport>& parts) {
  queue::ClientsReport out;
  for (const queue::ClientsReport& p : parts) {
    if (out.error.empty() && !p.error.empty()) out.error = p.error;
    out.list += p.list;
    out.connected += p.connected;
    out.blocked += p.blocked;
    out.max_input_buffer = std::max(out.max_input_buffer, p.max_input_buffer);
    out.max_output_buffer = std::max(out.max_output_buffer, p.max_output_buffer);
    out.killed += p.killed;
  }
  return out;
}

void ClientsFanout::Complete() {
  const queue::ClientsReport report = Merge(parts_);
  done_(report);
}

}  // namespace deferq::net
