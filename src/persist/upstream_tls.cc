#include "persist/upstream_tls.h"

#include <atomic>
#include <utility>

namespace deferq::persist {

namespace {
std::atomic<std::shared_ptr<io::TlsContext>> g_context;
}  // namespace

void SetUpstreamTls(std::shared_ptr<io::TlsContext> context) {
  g_context.store(std::move(context));
}

std::shared_ptr<io::TlsContext> UpstreamTls() { return g_context.load(); }

}  // namespace deferq::persist
