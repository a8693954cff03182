#!/usr/bin/env bash
# Job throughput of deferq against the same storage scripts run straight in Redis, and Redis memory
# per delayed job. Everything runs on this machine in one go; machines are shared, so read the
# ratios, not the absolute numbers.
#
# 1. publish/s: redis-benchmark -c 50 at pipeline depth 1 and 32,
#      deferq:  PUBLISH bench_pD <64-byte payload>                     (into deferq)
#      direct:  FCALL <publish function> 1 dq:{default/direct_pD}: now K record now "" 0
#               (into the same redis-server deferq uses)
#    The direct arguments are what deferq itself passes to publish.lua for a default job (see the
#    script's header and docs/storage.md): K a 16-byte generated-form key, the record 1 flag byte,
#    6-byte LE created_ms, 4-byte LE ttl, then the payload (75 bytes). Command-line arguments cannot
#    hold NUL bytes, so the direct record sets the state bits of its flag byte (the script
#    overwrites them: the stored record is that of a default job), a created_ms near now and a ttl of
#    16863616 s (86400 + 2^24) whose bytes are not 0; the script does the same work for any value.
#    K is "K000" + __rand_int__ (-r 2^31-1: a handful of collisions per million, harmless).
# 2. consume+ack/s: redis-benchmark cannot feed the id a CONSUME returned into the next ACK, so a
#    small C driver (hiredis, compiled here) does it: 50 connections, each in a closed loop sends
#    D CONSUMEs (one job each, TTR 120) pipelined, then one ACK per job returned, pipelined, and
#    again, until the queue that step 1 filled is empty. A job counts when its ACK answered 1;
#    rate = jobs / wall time. Direct, the same driver runs FCALL of consume (now, 120000, 1) and
#    FCALL of ack (now, K, derivable second), exactly the calls deferq makes. So both columns
#    measure the full lease-and-finish life of a job, two requests per job, with the same client.
# 3. memory: a fresh redis-server and deferq; 1,000,000 PUBLISH memq <64-byte payload>
#    PDELAY <uniform 0..3,599,999 ms> (redis-benchmark -P 32), i.e. delays spread over an hour;
#    prints (used_memory after - before) / jobs stored.
#
# Three runs per figure, interleaved deferq/direct (the order alternates between runs); medians,
# and the ratio deferq/direct per depth, printed next to the targets: >= 1.0 at -P 1, >= 0.8 at
# -P 32, <= 160 bytes per delayed job.
#
# Environment:
#   DEFERQ_BIN            deferq binary (default: build/src/deferq, built with ninja when missing)
#   DEFERQ_THREADS        deferq --threads (default 1: the other core runs the benchmark client)
#   BENCH_JOBS            jobs per run at depth 1 (default 50000)
#   BENCH_JOBS_PIPELINED  jobs per run at depth 32 (default 200000)
#   BENCH_MEMORY_JOBS     delayed jobs for the memory figure (default 1000000)
#   BENCH_ONLY=auth       only the auth.required on/off publish figure (and the rate limit's)
#   BENCH_ONLY=limits     the same
#   BENCH_ONLY=metrics    only the metrics on/off publish figure
#
# Also: publish/s with the metrics endpoint on (and scraped each second) against off, same sizes;
# and publish/s with auth.required = true (AUTH namespace token per connection) against auth off,
# also through a namespace with a rate limit far above the load.
set -euo pipefail
export LC_ALL=C

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deferq_bin=${DEFERQ_BIN:-$repo/build/src/deferq}
deferq_threads=${DEFERQ_THREADS:-1}
jobs_p1=${BENCH_JOBS:-50000}
jobs_p32=${BENCH_JOBS_PIPELINED:-200000}
memory_jobs=${BENCH_MEMORY_JOBS:-1000000}
runs=3
clients=50
scripts=$repo/src/persist/scripts

for tool in redis-benchmark redis-cli redis-server cc pkg-config; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done
pkg-config --exists hiredis || { echo "hiredis development files not found" >&2; exit 1; }


# shellcheck source=scripts/lib/servers.sh
source "$repo/scripts/lib/servers.sh"
ensure_deferq "$deferq_bin" "$repo/build" "$repo"
servers_init bench-jobs

# ---- The consume+ack driver --------------------------------------------------------------------
cat >"$workdir/consume_ack.c" <<'EOF'
// consume_ack MODE PORT CLIENTS DEPTH JOBS QUEUE [CONSUME_SHA ACK_SHA]
// MODE deferq: CONSUME QUEUE TTR 120 / ACK QUEUE id.  MODE direct: FCALL of consume and
// ack.lua on the queue's keys, as deferq calls them. Prints "<jobs/s> <jobs> <seconds>".
#include <hiredis/hiredis.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
  redisContext *c;
  int phase;  // 0 done, 1 consumes in flight, 2 acks in flight
  int pending, nids, drained;
  char **ids;
  size_t *idlen;
} Client;

static int direct, depth;
static long long jobs, issued, acked, ack_zero;
static const char *queue, *csha, *asha;
static char prefix[512];

static long long wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}
static double mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}
static void die(const char *what, const char *detail) {
  fprintf(stderr, "consume_ack: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}
static void flush(Client *cl) {
  int done = 0;
  while (!done) {
    if (redisBufferWrite(cl->c, &done) != REDIS_OK) die("write", cl->c->errstr);
  }
}

static void send_consumes(Client *cl) {
  long long left = jobs - issued;
  int n = left < depth ? (int)left : depth;
  if (n <= 0 || cl->drained) {
    cl->phase = 0;
    return;
  }
  char now[32];
  snprintf(now, sizeof now, "%lld", wall_ms());
  for (int i = 0; i < n; ++i) {
    if (direct) {
      const char *argv[] = {"FCALL", csha, "1", prefix, now, "120000", "1"};
      redisAppendCommandArgv(cl->c, 7, argv, NULL);
    } else {
      const char *argv[] = {"CONSUME", queue, "TTR", "120"};
      redisAppendCommandArgv(cl->c, 4, argv, NULL);
    }
  }
  issued += n;
  cl->pending = n;
  cl->nids = 0;
  cl->phase = 1;
  flush(cl);
}

static void send_acks(Client *cl) {
  char now[32];
  snprintf(now, sizeof now, "%lld", wall_ms());
  for (int i = 0; i < cl->nids; ++i) {
    if (direct) {
      // The derivable second deferq passes for a 16-byte generated-form key.
      char hint[32] = "";
      const unsigned char *k = (const unsigned char *)cl->ids[i];
      if (cl->idlen[i] == 16 && k[0] != '#') {
        long long ts = 0;
        for (int b = 0; b < 6; ++b) ts = ts << 8 | k[b];
        snprintf(hint, sizeof hint, "%lld", ts / 1000);
      }
      const char *argv[] = {"FCALL", asha, "1", prefix, now, cl->ids[i], hint};
      size_t len[] = {5, strlen(asha), 1, strlen(prefix), strlen(now), cl->idlen[i], strlen(hint)};
      redisAppendCommandArgv(cl->c, 7, argv, len);
    } else {
      const char *argv[] = {"ACK", queue, cl->ids[i]};
      size_t len[] = {3, strlen(queue), cl->idlen[i]};
      redisAppendCommandArgv(cl->c, 3, argv, len);
    }
  }
  cl->pending = cl->nids;
  cl->phase = 2;
  flush(cl);
}

static void on_reply(Client *cl, redisReply *r) {
  if (r->type == REDIS_REPLY_ERROR) die("error reply", r->str);
  if (cl->phase == 1) {
    const redisReply *id = NULL;
    if (direct) {  // { ready_left, K, payload, tries_left, ttl_left_s, attempt, created_ms }
      if (r->type != REDIS_REPLY_ARRAY || r->elements < 1) die("bad consume.lua reply", NULL);
      if (r->elements >= 7) id = r->element[1];
      else if (r->element[0]->integer == 0) cl->drained = 1;
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 7) {  // the 7-element job: [q, id, ...]
      id = r->element[1];
    } else if (r->type == REDIS_REPLY_NIL) {
      cl->drained = 1;
    } else {
      die("bad CONSUME reply", NULL);
    }
    if (id) {
      cl->ids[cl->nids] = malloc(id->len + 1);
      memcpy(cl->ids[cl->nids], id->str, id->len);
      cl->ids[cl->nids][id->len] = 0;
      cl->idlen[cl->nids++] = id->len;
    }
  } else {
    if (r->type != REDIS_REPLY_INTEGER) die("bad ACK reply", NULL);
    if (r->integer == 1) ++acked;
    else ++ack_zero;
  }
  if (--cl->pending > 0) return;
  if (cl->phase == 1 && cl->nids > 0) return send_acks(cl);
  for (int i = 0; i < cl->nids; ++i) free(cl->ids[i]);
  cl->nids = 0;
  send_consumes(cl);
}

int main(int argc, char **argv) {
  if (argc < 7) die("usage: consume_ack deferq|direct PORT CLIENTS DEPTH JOBS QUEUE [CSHA ASHA]", NULL);
  direct = strcmp(argv[1], "direct") == 0;
  int port = atoi(argv[2]), nclients = atoi(argv[3]);
  depth = atoi(argv[4]);
  jobs = atoll(argv[5]);
  queue = argv[6];
  if (direct) {
    if (argc < 9) die("direct needs CONSUME_SHA ACK_SHA", NULL);
    csha = argv[7];
    asha = argv[8];
  }
  snprintf(prefix, sizeof prefix, "dq:{default/%s}:", queue);
  Client *cls = calloc(nclients, sizeof *cls);
  struct pollfd *pfd = calloc(nclients, sizeof *pfd);
  for (int i = 0; i < nclients; ++i) {
    cls[i].c = redisConnect("127.0.0.1", port);
    if (!cls[i].c || cls[i].c->err) die("connect", cls[i].c ? cls[i].c->errstr : "oom");
    cls[i].ids = calloc(depth, sizeof(char *));
    cls[i].idlen = calloc(depth, sizeof(size_t));
  }
  double t0 = mono();
  for (int i = 0; i < nclients; ++i) send_consumes(&cls[i]);
  for (;;) {
    int n = 0;
    for (int i = 0; i < nclients; ++i) {
      if (cls[i].phase == 0) continue;
      pfd[n].fd = cls[i].c->fd;
      pfd[n].events = POLLIN;
      pfd[n].revents = 0;
      ++n;
    }
    if (n == 0) break;
    if (poll(pfd, n, 30000) <= 0) die("no reply within 30 s", NULL);
    for (int i = 0, k = 0; i < nclients; ++i) {
      if (cls[i].phase == 0) continue;
      if (pfd[k++].revents == 0) continue;
      if (redisBufferRead(cls[i].c) != REDIS_OK) die("read", cls[i].c->errstr);
      void *reply;
      while (cls[i].phase != 0) {
        if (redisGetReplyFromReader(cls[i].c, &reply) != REDIS_OK) die("parse", cls[i].c->errstr);
        if (reply == NULL) break;
        on_reply(&cls[i], reply);
        freeReplyObject(reply);
      }
    }
  }
  double secs = mono() - t0;
  printf("%.2f %lld %.3f %lld\n", acked / secs, acked, secs, ack_zero);
  return 0;
}
EOF
# shellcheck disable=SC2046  # pkg-config prints several words
cc -O2 -o "$workdir/consume_ack" "$workdir/consume_ack.c" $(pkg-config --cflags --libs hiredis)

# start_deferq NAME REDIS_PORT: deferq on that pool, once its job commands reach Redis.
start_deferq() {
  local name=$1 port=$2
  shift 2
  start_server "$name" "$deferq_bin" --threads "$deferq_threads" \
    --pool "default=redis://127.0.0.1:$port" "$@"
  wait_deferq_pool "$name"
}

start_server redis redis-server --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir"
redis_port=$started_port
start_deferq deferq "$redis_port"
deferq_port=$started_port

# The storage library as the build makes it (deferq has loaded it into this Redis already; loading
# it again here is idempotent), and the FCALL names of its functions.
library=$(python3 "$repo/src/persist/embed_scripts.py" --library "$scripts")
loaded=$(printf '%s' "$library" | redis-cli -p "$redis_port" -x FUNCTION LOAD REPLACE)
[[ $loaded == deferq_* ]] || { echo "FUNCTION LOAD failed: $loaded" >&2; exit 1; }
version=${loaded#deferq_}
publish_sha=dq_${version}_publish
consume_sha=dq_${version}_consume
ack_sha=dq_${version}_ack
purge_sha=dq_${version}_purge

# ---- Argument values for the direct publish ----------------------------------------------------
# le BYTES VALUE: VALUE as BYTES little-endian bytes, hex-escaped for printf.
le() {
  local i v=$2 out=''
  for ((i = 0; i < $1; i++)); do
    out+=$(printf '\\x%02x' $((v & 255)))
    v=$((v >> 8))
  done
  printf '%s' "$out"
}
# safe_bytes BYTES VALUE: VALUE with each of its low BYTES bytes that cannot sit in an argument
# (NUL) or would break redis-benchmark's CSV line (LF, CR, '"', ',') raised by one.
safe_bytes() {
  local i b out=0
  for ((i = 0; i < $1; i++)); do
    b=$((($2 >> (8 * i)) & 255))
    case $b in 0 | 10 | 13 | 34 | 44) b=$((b + 1)) ;; esac
    out=$((out | (b << (8 * i))))
  done
  echo "$out"
}
now=$(date +%s%3N)
created=$(safe_bytes 6 "$now")  # never earlier than now
ttl=$((86400 + (1 << 24)))
filler=$(printf 'x%.0s' {1..51})
payload="__rand_int__-$filler"  # 12 digits + 52 = 64 bytes
# shellcheck disable=SC2059
record=$(printf "\\x03$(le 6 "$created")$(le 4 "$ttl")")$payload
((${#payload} == 64)) || { echo "payload is ${#payload} bytes" >&2; exit 1; }

# The direct record must be a default job's: deferq itself reads one back.
redis-cli -p "$redis_port" FCALL "$publish_sha" 1 "dq:{default/sanity}:" "$now" K000sanitycheck0 \
  "$record" "$now" "" 0 >/dev/null
mapfile -t peek < <(redis-cli -p "$deferq_port" PEEK sanity)
if [[ ${peek[2]:-} != "$payload" || ${peek[3]:-} != 1 || ${peek[4]:-} -le 86400 ]]; then
  echo "deferq reads the direct record back as: ${peek[*]}" >&2
  exit 1
fi
redis-cli -p "$deferq_port" PURGE sanity >/dev/null

# ---- Measurements ------------------------------------------------------------------------------
# rps of one redis-benchmark run: bench_rps PORT DEPTH REQUESTS COMMAND...
bench_rps() {
  local port=$1 depth=$2 n=$3 csv rps
  shift 3
  csv=$(redis-benchmark -h 127.0.0.1 -p "$port" -c "$clients" -n "$n" -P "$depth" \
    -r 2147483647 --csv "$@" 2>/dev/null | tail -1)
  # The title is the command line; read the numbers from the end of the row.
  rps=$(awk -F, '{ v = $(NF - 6); gsub(/"/, "", v); print v }' <<<"$csv")
  if ! [[ $rps =~ ^[0-9.]+$ ]]; then
    echo "redis-benchmark gave no result on port $port: $(cat -v <<<"$csv")" >&2
    return 1
  fi
  echo "$rps"
}

check_published() {  # check_published QUEUE EXPECTED-AT-LEAST
  local stat
  stat=$(redis-cli -p "$deferq_port" QSTAT "$1" | sed -n 2p)
  if ! [[ $stat =~ ^[0-9]+$ ]] || ((stat < $2)); then
    echo "queue $1 holds '$stat' ready jobs after the publish run, expected $2; a PUBLISH answers:" >&2
    redis-cli -p "$deferq_port" PUBLISH "$1" "$payload" >&2
    return 1
  fi
}

publish_deferq() { bench_rps "$deferq_port" "$1" "$2" PUBLISH "$3" "$payload"; }
publish_direct() {
  bench_rps "$redis_port" "$1" "$2" FCALL "$publish_sha" 1 "dq:{default/$3}:" "$now" \
    "K000__rand_int__" "$record" "$now" "" 0
}
consume_ack() {  # consume_ack deferq|direct DEPTH JOBS QUEUE
  local port=$deferq_port out
  [[ $1 == direct ]] && port=$redis_port
  out=$("$workdir/consume_ack" "$1" "$port" "$clients" "$2" "$3" "$4" "$consume_sha" "$ack_sha")
  read -r rps finished _ <<<"$out"
  if ((finished < $3 * 99 / 100)); then
    echo "consume+ack $1 -P $2 finished only $finished of $3 jobs" >&2
    return 1
  fi
  echo "$rps"
}
purge() {
  redis-cli -p "$deferq_port" PURGE "$1" >/dev/null
  redis-cli -p "$redis_port" FCALL "$purge_sha" 1 "dq:{default/$2}:" >/dev/null
}

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
verdict() { awk -v r="$1" -v t="$2" -v op="$3" 'BEGIN {
  ok = (op == ">=") ? (r >= t) : (r <= t); print ok ? "met" : "NOT met" }'; }

# ---- What auth.required costs the publish path ---------------------------------------------------
# The same publishes through two deferq instances on the same Redis: one with auth.required = true
# (every redis-benchmark connection sends AUTH <namespace> <token>; each job command checks its
# binding, which is looked up again in pool "default" once per auth.cache_seconds), one with auth
# off. Nine interleaved runs each (BENCH_AUTH_RUNS), medians and the median of paired runs;
# target: on/off >= 0.95.
auth_section() {
  local depth n run who port order vals cpus
  # Both instances pinned to the same core (the last one), so the two see the same machine.
  local cpu=$(($(nproc) - 1))
  start_deferq_auth deferq-authon taskset -c "$cpu" "$deferq_bin" --threads "$deferq_threads" \
    --pool "default=redis://127.0.0.1:$redis_port"
  authon_port=$started_port
  authon_pid=$started_pid  # taskset execs deferq: the same process
  start_server deferq-authoff taskset -c "$cpu" "$deferq_bin" --threads "$deferq_threads" \
    --pool "default=redis://127.0.0.1:$redis_port"
  authoff_port=$started_port
  authoff_pid=$started_pid
  for ((i = 0; i < 100; i++)); do
    [[ $(redis-cli -p "$authoff_port" QSTAT probe 2>&1 | head -1) == ready ]] && break
    sleep 0.05
  done
  auth_ns="bench$RANDOM"
  auth_token=$(namespace_token "$authon_port" "$auth_ns")
  # "limit": the auth instance again, through a second namespace whose publish rate limit is far
  # above the load (10^9/s), so every publish also goes through the rate limiter (issue 10 item
  # 4: auth.required = true and a rate limit, against auth off).
  limit_ns="benchlim$RANDOM"
  limit_token=$(namespace_token "$authon_port" "$limit_ns")
  limit_set=$(deferq_admin "$authon_port" "LIMIT SET $limit_ns PUBLISH 1000000000")
  [[ $limit_set == OK ]] || { echo "LIMIT SET $limit_ns answered '$limit_set'" >&2; return 1; }
  # Every run's command line, per instance.
  auth_who=(limit on off)
  declare -gA auth_port_of=([limit]=$authon_port [on]=$authon_port [off]=$authoff_port)
  declare -gA auth_pid_of=([limit]=$authon_pid [on]=$authon_pid [off]=$authoff_pid)
  declare -gA auth_args_of=([limit]="--user $limit_ns -a $limit_token"
    [on]="--user $auth_ns -a $auth_token" [off]="")
  declare -gA ares acpu
  # Besides the rate (which the machine's other load moves a lot), the CPU deferq spent per
  # publish (utime + stime from /proc, 10 ms ticks): the steadier figure on a shared machine.
  cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
  local t0 t1 pairs
  # Nine interleaved runs (the order rotates), as in the metrics section: neighbouring runs of one
  # instance differ by 10-20% even on a quiet machine, so besides the medians of each the figure
  # is the median of the paired ratios (a run's "on" or "limit" against the "off" run next to it
  # in time).
  auth_runs=${BENCH_AUTH_RUNS:-9}
  printf '\n%-22s %-6s %-11s %s\n' figure depth deferq "runs 1-$auth_runs, median"
  for depth in 1 32; do
    n=$jobs_p1
    ((depth == 1)) || n=$jobs_p32
    for ((run = 1; run <= auth_runs; run++)); do
      order=("${auth_who[@]}")
      ((run % 2)) || order=($(printf '%s\n' "${auth_who[@]}" | tac))
      for who in "${order[@]}"; do
        port=${auth_port_of[$who]}
        t0=$(cpu_ticks "${auth_pid_of[$who]}")
        # shellcheck disable=SC2086  # the auth arguments are words
        ares[$depth,$who,$run]=$(bench_rps "$port" "$depth" "$n" ${auth_args_of[$who]} \
          PUBLISH "auth_$who" "$payload")
        t1=$(cpu_ticks "${auth_pid_of[$who]}")
        acpu[$depth,$who,$run]=$(awk -v t="$((t1 - t0))" -v n="$n" \
          -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t * 1e6 / hz / n }')
        # shellcheck disable=SC2086
        redis-cli -p "$port" ${auth_args_of[$who]/-a/--pass} --no-auth-warning \
          PURGE "auth_$who" >/dev/null
      done
    done
    for who in "${auth_who[@]}"; do
      vals=() cpus=()
      for ((run = 1; run <= auth_runs; run++)); do
        vals+=("${ares[$depth,$who,$run]}")
        cpus+=("${acpu[$depth,$who,$run]}")
      done
      ares[$depth,$who,median]=$(median "${vals[@]}")
      acpu[$depth,$who,median]=$(median "${cpus[@]}")
      printf '%-22s %-6s %-11s' "publish/s" "P$depth" "auth $who"
      printf ' %8.0f' "${vals[@]}"
      printf '   median %8.0f\n' "${ares[$depth,$who,median]}"
      printf '%-22s %-6s %-11s' "deferq CPU us/publish" "P$depth" "auth $who"
      printf ' %8.2f' "${cpus[@]}"
      printf '   median %8.2f\n' "${acpu[$depth,$who,median]}"
    done
    for who in on limit; do
      pairs=()
      for ((run = 1; run <= auth_runs; run++)); do
        pairs+=("$(ratio "${ares[$depth,$who,$run]}" "${ares[$depth,off,$run]}")")
      done
      ares[$depth,$who,pairs]=$(median "${pairs[@]}")
      printf '%-22s %-6s %-11s' "paired $who/off" "P$depth" ""
      printf ' %8s' "${pairs[@]}"
      printf '   median %8s\n' "${ares[$depth,$who,pairs]}"
    done
  done
}
auth_summary() {
  local depth r who title
  for depth in 1 32; do
    for who in on limit; do
      title="auth on/off"
      [[ $who == limit ]] && title="auth + limit 1e9/s vs auth off"
      r=${ares[$depth,$who,pairs]}
      printf '  %-14s -P %-3s %s = %s  (paired runs; target >= 0.95: %s; publish/s medians %s, %.0f vs %.0f)\n' \
        "publish" "$depth" "$title" "$r" "$(verdict "$r" 0.95 '>=')" \
        "$(ratio "${ares[$depth,$who,median]}" "${ares[$depth,off,median]}")" \
        "${ares[$depth,$who,median]}" "${ares[$depth,off,median]}"
      r=$(ratio "${acpu[$depth,$who,median]}" "${acpu[$depth,off,median]}")
      printf '  %-14s -P %-3s %s = %s  (target <= 1.05: %s; median %.2f vs %.2f us)\n' \
        "CPU/publish" "$depth" "$title" "$r" "$(verdict "$r" 1.05 '<=')" \
        "${acpu[$depth,$who,median]}" "${acpu[$depth,off,median]}"
    done
  done
  echo "  (publishes refused with RATELIMIT meanwhile: $(redis-cli -p "$authon_port" INFO stats |
    tr -d '\r' | awk -F: '$1 == "rejected_ratelimit_publish" { print $2 }'))"
}

echo "deferq --threads $deferq_threads; $(redis-server --version | awk '{ print $1, $2, $3 }');" \
  "redis-benchmark / consume_ack driver -c $clients; $runs interleaved runs; $(nproc) cores"
echo "jobs per run: $jobs_p1 at -P 1, $jobs_p32 at -P 32; 64-byte payloads, default options"
# Warm-up (not counted).
publish_deferq 1 20000 warm >/dev/null
publish_direct 1 20000 warm_direct >/dev/null
consume_ack deferq 1 20000 warm >/dev/null
consume_ack direct 1 20000 warm_direct >/dev/null
purge warm warm_direct
# BENCH_ONLY=auth (or limits): only the auth.required and rate-limit figure (below), against the
# same Redis.
if [[ ${BENCH_ONLY:-} == auth || ${BENCH_ONLY:-} == limits ]]; then
  auth_section
  echo
  echo "summary"
  auth_summary
  echo "($SECONDS s in all)"
  exit 0
fi

declare -A res
# BENCH_ONLY=metrics: only the metrics on/off figure (below).
if [[ ${BENCH_ONLY:-} != metrics ]]; then
printf '\n%-13s %-6s %-7s %12s %12s %12s %12s\n' figure depth server run1 run2 run3 median
for depth in 1 32; do
  n=$jobs_p1
  ((depth == 1)) || n=$jobs_p32
  for ((run = 1; run <= runs; run++)); do
    order=(deferq direct)
    ((run % 2)) || order=(direct deferq)
    for who in "${order[@]}"; do
      if [[ $who == deferq ]]; then
        res[pub,$depth,$who,$run]=$(publish_deferq "$depth" "$n" "bench_p$depth")
        check_published "bench_p$depth" $((n * 99 / 100))
      else
        res[pub,$depth,$who,$run]=$(publish_direct "$depth" "$n" "direct_p$depth")
      fi
    done
    for who in "${order[@]}"; do
      q=bench_p$depth
      [[ $who == direct ]] && q=direct_p$depth
      res[con,$depth,$who,$run]=$(consume_ack "$who" "$depth" "$n" "$q")
    done
    purge "bench_p$depth" "direct_p$depth"
  done
  for fig in pub con; do
    label=publish/s
    [[ $fig == con ]] && label=consume+ack/s
    for who in deferq direct; do
      vals=("${res[$fig,$depth,$who,1]}" "${res[$fig,$depth,$who,2]}" "${res[$fig,$depth,$who,3]}")
      res[$fig,$depth,$who,median]=$(median "${vals[@]}")
      printf '%-13s %-6s %-7s %12.0f %12.0f %12.0f %12.0f\n' "$label" "P$depth" "$who" \
        "${vals[@]}" "${res[$fig,$depth,$who,median]}"
    done
  done
done

fi  # BENCH_ONLY != metrics

# ---- What the metrics endpoint costs the publish path --------------------------------------------
# The same publishes through two more deferq instances on the same Redis, one with
# server.metrics_listen off (no endpoint, nothing scraped, no per-command counting or timing and
# no upstream latency histogram; the slow-command clock and the queue figures' reads from Redis
# run either way, docs/metrics.md "Cost") and one with it on a free port, scraped every second
# through the whole section (as Prometheus would, only more often; the scraper runs during the
# "off" runs too, so its own CPU does not count against "on"). These machines vary by 15-20% from
# one run to the next, so the figure is the median of paired runs (below). Target: on/off >= 0.97.
metrics_port=$(free_port)
printf '[server]\nmetrics_listen = "127.0.0.1:%d"\n' "$metrics_port" >"$workdir/mon.toml"
printf '[server]\nmetrics_listen = "off"\n' >"$workdir/moff.toml"
# Both instances pinned to the same core (the last one), as in the auth section, so the two see
# the same machine; the rest (Redis, redis-benchmark, the scraper) runs on the other cores.
mcpu=$(($(nproc) - 1))
start_deferq deferq-mon "$redis_port" --config "$workdir/mon.toml"
mon_port=$started_port
mon_pid=$started_pid
start_deferq deferq-moff "$redis_port" --config "$workdir/moff.toml"
moff_port=$started_port
taskset -pac "$mcpu" "$mon_pid" >/dev/null
taskset -pac "$mcpu" "$started_pid" >/dev/null
moff_pid=$started_pid
mcpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
scrape_loop() {  # scrapes /metrics once a second until killed; counts failures
  while true; do
    exec 3<>"/dev/tcp/127.0.0.1/$metrics_port" || { echo fail >>"$workdir/scrapes"; sleep 1; continue; }
    printf 'GET /metrics HTTP/1.1\r\nHost: b\r\n\r\n' >&3
    head -1 <&3 >>"$workdir/scrapes"
    exec 3<&-
    sleep 1
  done
}
scrape_loop &
scraper=$!
# Nine interleaved runs; besides the medians of each, the median of the nine paired ratios (a
# run's "on" against the "off" next to it in time, which saw the same machine) and deferq's own
# CPU per publish (utime + stime from /proc), the steadier figures on a shared machine.
metrics_runs=${BENCH_METRICS_RUNS:-9}
declare -A mres mcpu_of
printf '\n%-22s %-6s %-9s %s\n' figure depth deferq "runs 1-$metrics_runs, median"
for depth in 1 32; do
  n=$jobs_p1
  ((depth == 1)) || n=$jobs_p32
  for ((run = 1; run <= metrics_runs; run++)); do
    order=(on off)
    ((run % 2)) || order=(off on)
    for who in "${order[@]}"; do
      port=$mon_port
      pid=$mon_pid
      [[ $who == off ]] && port=$moff_port && pid=$moff_pid
      t0=$(mcpu_ticks "$pid")
      mres[$depth,$who,$run]=$(bench_rps "$port" "$depth" "$n" PUBLISH "metrics_$who" "$payload")
      t1=$(mcpu_ticks "$pid")
      mcpu_of[$depth,$who,$run]=$(awk -v t="$((t1 - t0))" -v n="$n" \
        -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.3f", t * 1e6 / hz / n }')
      redis-cli -p "$port" PURGE "metrics_$who" >/dev/null
    done
  done
  for who in on off; do
    vals=()
    cpus=()
    for ((run = 1; run <= metrics_runs; run++)); do
      vals+=("${mres[$depth,$who,$run]}")
      cpus+=("${mcpu_of[$depth,$who,$run]}")
    done
    mres[$depth,$who,median]=$(median "${vals[@]}")
    mcpu_of[$depth,$who,median]=$(median "${cpus[@]}")
    printf '%-22s %-6s %-9s' "publish/s" "P$depth" "metrics $who"
    printf ' %8.0f' "${vals[@]}"
    printf '   median %8.0f\n' "${mres[$depth,$who,median]}"
    printf '%-22s %-6s %-9s' "deferq CPU us/publish" "P$depth" "metrics $who"
    printf ' %8.2f' "${cpus[@]}"
    printf '   median %8.2f\n' "${mcpu_of[$depth,$who,median]}"
  done
  pairs=()
  for ((run = 1; run <= metrics_runs; run++)); do
    pairs+=("$(ratio "${mres[$depth,on,$run]}" "${mres[$depth,off,$run]}")")
  done
  mres[$depth,pairs]=$(median "${pairs[@]}")
  printf '%-22s %-6s %-9s' "paired on/off" "P$depth" ""
  printf ' %8s' "${pairs[@]}"
  printf '   median %8s\n' "${mres[$depth,pairs]}"
done
kill "$scraper"
wait "$scraper" 2>/dev/null || true
scrapes_ok=$(grep -c '^HTTP/1.1 200' "$workdir/scrapes" || true)
scrapes_all=$(wc -l <"$workdir/scrapes")
for depth in 1 32; do
  # Capacity: publishes per second of deferq CPU (1 / CPU per publish), what one core carries;
  # the rates themselves swing 15-20% between neighbouring runs here.
  cap=$(ratio "${mcpu_of[$depth,off,median]}" "${mcpu_of[$depth,on,median]}")
  echo "  metrics on/off at -P $depth: capacity (1 / deferq CPU per publish) $cap" \
    "(target >= 0.97: $(verdict "$cap" 0.97 '>=')); publish/s medians" \
    "$(ratio "${mres[$depth,on,median]}" "${mres[$depth,off,median]}"), paired runs ${mres[$depth,pairs]}"
done
if [[ ${BENCH_ONLY:-} == metrics ]]; then
  echo "($SECONDS s in all)"
  exit 0
fi

# ---- What the timing wheel and the cross-instance wake cost the publish path ---------------------
# The same delayed publishes through two deferq instances on the same Redis: one as configured
# by default (wheel on: each publish schedules its queue's pump at its due millisecond; wake on:
# a pub/sub subscriber, markers for blocked queues), one with both off (periodic sweep only).
cat >"$workdir/off.toml" <<'TOML'
[server]
wheel = false
cross_instance_wake = false
TOML
start_deferq deferq-off "$redis_port" --config "$workdir/off.toml"
off_port=$started_port
wheel_jobs=${BENCH_WHEEL_JOBS:-100000}
publish_delayed() {  # publish_delayed PORT DEPTH QUEUE
  bench_rps "$1" "$2" "$wheel_jobs" PUBLISH "$3" "$payload" PDELAY 1__rand_int__
}
declare -A wres
printf '\n%-22s %-6s %-9s %12s %12s %12s %12s\n' figure depth deferq run1 run2 run3 median
for depth in 1 32; do
  for ((run = 1; run <= runs; run++)); do
    order=(on off)
    ((run % 2)) || order=(off on)
    for who in "${order[@]}"; do
      port=$deferq_port
      [[ $who == off ]] && port=$off_port
      wres[$depth,$who,$run]=$(publish_delayed "$port" "$depth" "wheel_$who")
      redis-cli -p "$port" PURGE "wheel_$who" >/dev/null
    done
  done
  for who in on off; do
    vals=("${wres[$depth,$who,1]}" "${wres[$depth,$who,2]}" "${wres[$depth,$who,3]}")
    wres[$depth,$who,median]=$(median "${vals[@]}")
    printf '%-22s %-6s %-9s %12.0f %12.0f %12.0f %12.0f\n' "publish delayed/s" "P$depth" \
      "wheel $who" "${vals[@]}" "${wres[$depth,$who,median]}"
  done
done

auth_section

# ---- Memory per delayed job --------------------------------------------------------------------
start_server redis-mem redis-server --bind 127.0.0.1 --save '' --appendonly no --dir "$workdir"
mem_redis_port=$started_port
start_deferq deferq-mem "$mem_redis_port"
mem_deferq_port=$started_port
used_memory() {
  redis-cli -p "$mem_redis_port" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'
}
before=$(used_memory)
t0=$(date +%s%3N)
# redis-benchmark writes __rand_int__ as 12 zero-padded digits, which deferq (like Redis) refuses as
# a number; the leading 1 makes it one (a delay of ~31.7 years + 0..3599999 ms: 3,600 buckets).
redis-benchmark -h 127.0.0.1 -p "$mem_deferq_port" -c "$clients" -n "$memory_jobs" -P 32 \
  -r 3600000 --csv PUBLISH memq "$payload" PDELAY 1__rand_int__ >/dev/null 2>&1
t1=$(date +%s%3N)
mapfile -t stat < <(redis-cli -p "$mem_deferq_port" QSTAT memq)
stored=$((stat[1] + stat[3] + stat[5] + stat[7]))
after=$(used_memory)
per_job=$(awk -v a="$after" -v b="$before" -v n="$stored" 'BEGIN { printf "%.1f", (a - b) / n }')
keys=$(redis-cli -p "$mem_redis_port" DBSIZE)

echo
echo "memory: $memory_jobs x PUBLISH memq <64 bytes> PDELAY <1e12 + 0..3599999 ms> through deferq" \
  "(-P 32, $(((t1 - t0) / 1000)) s): ${stat[1]} ready + ${stat[3]} delayed stored, $keys keys;" \
  "used_memory $before -> $after"
echo
echo "summary (targets: deferq/direct >= 1.0 at -P 1, >= 0.8 at -P 32; <= 160 bytes/job)"
for fig in pub con; do
  label=publish/s
  [[ $fig == con ]] && label=consume+ack/s
  for depth in 1 32; do
    target=1.0
    ((depth == 1)) || target=0.8
    r=$(ratio "${res[$fig,$depth,deferq,median]}" "${res[$fig,$depth,direct,median]}")
    printf '  %-14s -P %-3s deferq/direct = %s  (target >= %s: %s; median %.0f vs %.0f)\n' \
      "$label" "$depth" "$r" "$target" "$(verdict "$r" "$target" '>=')" \
      "${res[$fig,$depth,deferq,median]}" "${res[$fig,$depth,direct,median]}"
  done
done
printf '  %-14s %s bytes per delayed job  (target <= 160: %s)\n' memory "$per_job" \
  "$(verdict "$per_job" 160 '<=')"
for depth in 1 32; do
  r=$(ratio "${wres[$depth,on,median]}" "${wres[$depth,off,median]}")
  printf '  %-14s -P %-3s wheel+wake on/off = %s  (target >= 0.95: %s; median %.0f vs %.0f)\n' \
    "publish delayed" "$depth" "$r" "$(verdict "$r" 0.95 '>=')" "${wres[$depth,on,median]}" \
    "${wres[$depth,off,median]}"
done
for depth in 1 32; do
  r=$(ratio "${mres[$depth,on,median]}" "${mres[$depth,off,median]}")
  printf '  %-14s -P %-3s metrics on/off = %s  (target >= 0.97: %s; median %.0f vs %.0f)\n' \
    "publish" "$depth" "$r" "$(verdict "$r" 0.97 '>=')" "${mres[$depth,on,median]}" \
    "${mres[$depth,off,median]}"
done
echo "  (/metrics scraped once a second through those runs: $scrapes_ok of $scrapes_all answered 200)"
auth_summary
echo "($SECONDS s in all)"
