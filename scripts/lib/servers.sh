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

# free_port: prints a random loopback port nobody listens on, below the kernel's ephemeral range
# (ip_local_port_range): a port in that range can be taken by any outgoing connection between
# the check and the listen (a bench's deferq once found its metrics port taken by its own
# connection to Redis). 100 tries at most.
free_port() {
  local low p i span
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || low=32768
  span=$((low - 20000))
  ((span >= 1000)) || span=40000 # an unusual range: anywhere from 20000 on
  for ((i = 0; i < 100; i++)); do
    p=$((20000 + RANDOM % span))
    port_is_free "$p" && { echo "$p"; return 0; }
  done
  echo "no free loopback port" >&2
  return 1
}

# start_server NAME BINARY ARGS...: picks a random free loopback port (appended as "--port P"),
# starts the server in the background with its output in $workdir/NAME.log, and waits (at most
# 10 s) for PONG. A port taken in between makes the server exit, and another port is tried.
# Sets started_port and started_pid.
start_server() {
  local name=$1
  shift
  local attempt port pid i
  for ((attempt = 0; attempt < 10; attempt++)); do
    port=$(free_port) || continue
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

# wait_deferq_pool NAME: waits (at most 5 s) until the deferq just started as NAME (on
# $started_port) reaches its pool "default" with job commands; fails with its log otherwise.
wait_deferq_pool() {
  local i
  for ((i = 0; i < 100; i++)); do
    [[ $(redis-cli -p "$started_port" QSTAT probe 2>&1 | head -1) == ready ]] && return 0
    sleep 0.05
  done
  echo "deferq ($1) does not reach its pool; its log:" >&2
  cat "$workdir/$1.log" >&2
  return 1
}

# start_deferq_auth NAME BINARY ARGS...: start_server for a deferq with auth.required = true (its
# config file is $workdir/NAME.toml: ARGS name no other --config) and a random admin password in
# $admin_password, handed to deferq through its environment only. Waits until its admin commands
# reach pool "default". Sets started_port, started_pid and admin_password.
start_deferq_auth() {
  local name=$1 i
  shift
  admin_password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  printf '[auth]\nrequired = true\nadmin_password_env = "DEFERQ_SERVERS_ADMIN_PASSWORD"\n' \
    >"$workdir/$name.toml"
  export DEFERQ_SERVERS_ADMIN_PASSWORD=$admin_password
  start_server "$name" "$@" --config "$workdir/$name.toml"
  unset DEFERQ_SERVERS_ADMIN_PASSWORD
  for ((i = 0; i < 100; i++)); do
    [[ $(deferq_admin "$started_port" "NAMESPACE LIST") != TRYAGAIN* ]] && return 0
    sleep 0.05
  done
}

# deferq_admin PORT COMMAND: one admin command on deferq's admin connection (the password goes
# on stdin, never in argv); prints the last line of its reply.
deferq_admin() {
  printf 'AUTH admin %s\n%s\n' "$admin_password" "$2" | redis-cli -p "$1" | tail -1
}

# namespace_token PORT NAMESPACE: creates the namespace and prints a new token of it; fails (with
# the reply on stderr) when either step does.
namespace_token() {
  local reply token
  reply=$(deferq_admin "$1" "NAMESPACE CREATE $2")
  [[ $reply == OK ]] || { echo "NAMESPACE CREATE $2 answered '$reply'" >&2; return 1; }
  token=$(deferq_admin "$1" "TOKEN CREATE $2")
  [[ $token =~ ^[0-9a-f]{48}$ ]] || { echo "TOKEN CREATE $2 answered '$token'" >&2; return 1; }
  echo "$token"
}
