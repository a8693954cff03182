// The TLS context of rediss:// pools (the [tls] upstream_* files): set on the main thread at
// startup, before any connection, and again on SIGHUP; read by every upstream connection when it
// connects (a connection keeps the context it connected with). Thread-safe.
#pragma once

#include <memory>

#include "io/tls.h"

namespace deferq::persist {

void SetUpstreamTls(std::shared_ptr<io::TlsContext> context);
std::shared_ptr<io::TlsContext> UpstreamTls();

}  // namespace deferq::persist
