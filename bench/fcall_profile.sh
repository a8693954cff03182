#!/usr/bin/env bash
# Where Redis's time per job goes, function by function (bench/fcall_profile.py): the fleet shape
# of bench/fleet.sh "waiting" (1,000 jobs/s on one queue, 4 consumers blocked with COUNT 1, an
# ACK each) by default, each deferq function's calls per job, µs per call and per job, and the
# commands it runs, against a trivial function's µs measured on the same redis-server in the same
# run. About 20 s.
#
# Environment: DEFERQ_BIN (default build/src/deferq), PROFILE_QUEUES (1; 1000 is fleet.sh's
# "many"), PROFILE_COUNT (1), PROFILE_JOBS (6000), PROFILE_WINDOW_MS (6000).
set -euo pipefail
export LC_ALL=C
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
for tool in redis-server redis-cli taskset /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done
# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"
[[ -x $repo/build/bench/lateness ]] || ninja -C "$repo/build" bench/lateness
exec timeout 600 /usr/bin/python3 "$repo/bench/fcall_profile.py" --deferq "$deferq_bin" \
  --lateness "$repo/build/bench/lateness" --queues "${PROFILE_QUEUES:-1}" \
  --count "${PROFILE_COUNT:-1}" --jobs "${PROFILE_JOBS:-6000}" \
  --window-ms "${PROFILE_WINDOW_MS:-6000}"
