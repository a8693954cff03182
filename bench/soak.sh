#!/usr/bin/env bash
# The soak: bench/soak.sh [SECONDS] (default 600) runs mixed traffic through two deferq instances
# on one redis-server and prints one line per minute (throughput, deferq RSS, Redis memory, queue
# population, lateness percentiles), then the job-count balance. See bench/soak.py.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DEFERQ_BIN:-build/src/deferq}
[ -x "$bin" ] || ninja -C build src/deferq >/dev/null
exec /usr/bin/python3 bench/soak.py "$bin" "${1:-600}"
