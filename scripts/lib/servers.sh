# Shared by the benchmark and test scripts that start their own redis-server / deferq processes
# on loopback: a private work directory, free random ports, a bounded wait for PONG, and cleanup
# of everything started (SIGTERM, then SIGKILL after 5 s) when the script exits.
# Usage:  source scripts/lib/servers.sh; servers_init NAME; start_server LOG-NAME BINARY ARGS...

# servers_init NAME: creates $workdir and arranges the cleanup.
servers_init() {
  workdir=$(mktemp -d "${TMPDIR:-/tmp}/deferq-$1.XXXXXX")
  server_pids=()
  trap servers_cleanup EXIT
}

servers_cleanup() {
  local pid i
  for pid in "${server_pids[@]}"; do
    kill -TERM "$pid" 2>/dev/null || continue
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$workdir"
}

# Nothing listens there (a connect is refused).
port_is_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_server NAME BINARY ARGS...: picks a random free loopback port (appended as "--port P"),
# starts the server in the background with its output in $workdir/NAME.log, and waits (at most
# 10 s) for PONG. A port taken in between makes the server exit, and another port is tried.
# Sets started_port and started_pid.
start_server() {
  local name=$1
  shift
  local attempt port pid i
  for ((attempt = 0; attempt < 10; attempt++)); do
    port=$((20000 + RANDOM % 40000))
    port_is_free "$port" || continue
    "$@" --port "$port" >"$workdir/$name.log" 2>&1 &
    pid=$!
    server_pids+=("$pid")
    for ((i = 0; i < 200; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      if [[ $(redis-cli -p "$port" PING 2>/dev/null || true) == PONG ]]; then
        started_port=$port
        started_pid=$pid
        return 0
      fi
      sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  echo "$name did not start; its log:" >&2
  cat "$workdir/$name.log" >&2
  return 1
}

# ensure_deferq BINARY BUILD_DIR REPO: builds deferq when BINARY is missing and was not named
# explicitly through DEFERQ_BIN (then a missing binary is an error).
ensure_deferq() {
  local bin=$1 build=$2 repo=$3
  [[ -x $bin ]] && return 0
  if [[ -n ${DEFERQ_BIN:-} ]]; then
    echo "DEFERQ_BIN=$DEFERQ_BIN is not an executable" >&2
    exit 1
  fi
  echo "building deferq ($bin is missing)" >&2
  [[ -d $build ]] || meson setup "$build" "$repo" >&2
  ninja -C "$build" src/deferq >&2
}
