#!/usr/bin/env bash
# deferq through redis-cli: plain command lines, and commands piped on stdin (one connection) for
# MULTI/EXEC and pipelines; `-3` for RESP3. Without a tty redis-cli prints each reply element on
# its own line, integers as digits, a null reply as an empty line and an error as its text.
#
#   DEFERQ_PORT=P tests/clients/test_redis_cli.sh
#
# Run by run_clients.sh, which starts redis-server and deferq. Prints one line per check, then
# "N passed, M failed"; exits non-zero on any failure.
set -euo pipefail

port=${DEFERQ_PORT:?DEFERQ_PORT is not set}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/deferq-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
passed=0
failed=0
check() {  # check NAME EXPECTED ACTUAL
  if [[ $2 == "$3" ]]; then
    passed=$((passed + 1))
    echo "ok   redis-cli: $1"
  else
    failed=$((failed + 1))
    echo "FAIL redis-cli: $1"
    if [[ $2$3 == *$'\n'* ]]; then  # several lines: the first differences
      diff <(echo "$2") <(echo "$3") | head -12 | sed 's/^/     /' || true
    else
      echo "     expected: $(printf '%q' "$2")"
      echo "     actual:   $(printf '%q' "$3")"
    fi
  fi
}
id_re='^[0-9A-HJKMNP-TV-Z]{26}$'
now_ms() { date +%s%3N; }
is_id() { [[ $1 =~ $id_re ]] && echo yes || echo "no: $1"; }
# A job prints as 7 lines: queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms. The
# elapsed_ms lines (every 7th) vary: they are dropped when they are integers, kept otherwise.
jobs() { awk 'NR % 7 != 0 || !/^[0-9]+$/'; }
job_lines() { printf '%s\n' "$@"; }  # the expected lines of jobs, elapsed_ms left out

q=cli-basic-$RANDOM
id=$(cli PUBLISH "$q" 'hello redis-cli')
check "PUBLISH answers a 26-character id" yes "$(is_id "$id")"
check "CONSUME answers [queue, id, payload, tries_left, ttl_left_s, attempt, elapsed_ms]" \
  "$(job_lines "$q" "$id" 'hello redis-cli' 0 86400 1)" "$(cli CONSUME "$q" TTR 30 | jobs)"
check "CONSUME of an empty queue answers null" "" "$(cli CONSUME "$q")"
check "ACK answers 1" 1 "$(cli ACK "$q" "$id")"
check "a second ACK answers 0" 0 "$(cli ACK "$q" "$id")"
check "QSTAT" "$(printf '%s\n' ready 0 delayed 0 leased 0 dead 0 published_total 1 \
  consumed_total 1 acked_total 1 expired_total 0 dead_total 0 paused 0 schedules 0)" "$(cli QSTAT "$q")"

q=cli-options-$RANDOM
key=order-$RANDOM
t0=$(now_ms)
check "PUBLISH with PDELAY, TTL, TRIES and ID answers the ID" "$key" \
  "$(cli PUBLISH "$q" later PDELAY 300 TTL 600 TRIES 3 ID "$key")"
check "... and again the same id (idempotent)" "$key" "$(cli PUBLISH "$q" again ID "$key")"
cron_id=$(cli PUBLISH "$q-cron" digest CRON '0 9 * * mon-fri' TZ Europe/Paris)
check "PUBLISH with a quoted CRON spec and TZ answers an id" yes "$(is_id "$cron_id")"
check "... and CANCEL stops the schedule" 1 "$(cli CANCEL "$q-cron" "$cron_id")"
call_id=$(cli PUBLISH "$q-call" resize-42 RETAIN 600)
check "PUBLISH ... RETAIN answers an id" yes "$(is_id "$call_id")"
cli CONSUME "$q-call" >/dev/null
check "ACK ... RESULT finishes it with a result" 1 "$(cli ACK "$q-call" "$call_id" RESULT resized)"
check "WAITJOB answers the kept result" resized "$(cli WAITJOB "$q-call" "$call_id" TIMEOUT 5)"
check "CALL that nobody answers times out naming the job" yes \
  "$(cli CALL "$q-call" nobody ID call-9 TIMEOUT 0.2 | grep -q '^TIMEOUT job call-9 ' && echo yes)"
check "a blocking CONSUME gets the delayed job when due" \
  "$(job_lines "$q" "$key" later 2 600 1)" "$(cli CONSUME "$q" TTR 30 TIMEOUT 5 | jobs)"
took=$(($(now_ms) - t0))
check "... not before its due time" yes "$( ((took >= 250 && took < 3000)) && echo yes || echo "no: $took ms")"
check "ACK of the delayed job" 1 "$(cli ACK "$q" "$key")"

q=cli-count-$RANDOM
id1=$(cli PUBLISH "$q" one TRIES 2)
id2=$(cli PUBLISH "$q" 'two words')
check "CONSUME COUNT answers every job in publish order" \
  "$(job_lines "$q" "$id1" one 1 86400 1 "$q" "$id2" 'two words' 0 86400 1)" \
  "$(cli CONSUME "$q" COUNT 5 TTR 30 | jobs)"
check "ACK of several ids counts the ones found" 2 "$(cli ACK "$q" "$id1" "$id2")"

q=cli-timeout-$RANDOM
t0=$(now_ms)
out=$(cli CONSUME "$q" TIMEOUT 0.3)
took=$(($(now_ms) - t0))
check "CONSUME TIMEOUT 0.3 on an empty queue answers null" "" "$out"
check "... after about 0.3 s" yes "$( ((took >= 250 && took < 2000)) && echo yes || echo "no: $took ms")"

q=cli-wake-$RANDOM
cli CONSUME "$q" TTR 30 TIMEOUT 10 >"$tmp/blocked.out" &
blocked=$!
sleep 0.3
check "a blocked CONSUME waits" yes "$(kill -0 "$blocked" 2>/dev/null && echo yes || echo returned)"
t0=$(now_ms)
id=$(cli PUBLISH "$q" 'wake up')
wait "$blocked" || true
took=$(($(now_ms) - t0))
check "a redis-cli blocked in CONSUME is woken by a PUBLISH from another redis-cli" \
  "$(job_lines "$q" "$id" 'wake up' 0 86400 1)" "$(jobs <"$tmp/blocked.out")"
check "... within a second of the publish" yes "$( ((took < 1000)) && echo yes || echo "no: $took ms")"
check "ACK of the woken job" 1 "$(cli ACK "$q" "$id")"

# MULTI/EXEC: commands piped on stdin go through one connection.
q=cli-multi-$RANDOM
mapfile -t out < <(printf 'MULTI\nPUBLISH %s m1\nPUBLISH %s m2\nPUBLISH %s m3\nEXEC\n' "$q" "$q" "$q" | cli)
check "MULTI, 3 PUBLISH, EXEC: OK, QUEUED x3" "OK QUEUED QUEUED QUEUED" "${out[*]:0:4}"
check "... EXEC answers 3 ids" "yes yes yes" "$(is_id "${out[4]-}") $(is_id "${out[5]-}") $(is_id "${out[6]-}")"
check "... and created 3 jobs, in that order" \
  "$(job_lines "$q" "${out[4]-}" m1 0 86400 1 "$q" "${out[5]-}" m2 0 86400 1 "$q" "${out[6]-}" m3 0 86400 1)" \
  "$(cli CONSUME "$q" COUNT 10 TTR 30 | jobs)"
cli ACK "$q" "${out[@]:4:3}" >/dev/null

q=cli-execabort-$RANDOM
check "a syntax error inside MULTI: EXEC answers EXECABORT" \
  "$(printf '%s\n' OK QUEUED 'ERR syntax error' '' QUEUED \
    'EXECABORT Transaction discarded because of previous errors.' '' PONG)" \
  "$(printf 'MULTI\nPUBLISH %s a\nPUBLISH %s b NOSUCHOPTION 1\nPUBLISH %s c\nEXEC\nPING\n' \
    "$q" "$q" "$q" | cli 2>&1)"
check "... and created no job" "0 0" "$(cli QSTAT "$q" | awk 'NR == 2 || NR == 10' | xargs)"

q=cli-pipe-$RANDOM
for ((i = 0; i < 50; i++)); do printf 'PUBLISH %s job-%d\n' "$q" "$i"; done >"$tmp/pipe.in"
mapfile -t ids < <(cli <"$tmp/pipe.in")
check "a pipeline of 50 PUBLISH answers 50 distinct ids" "50 50" \
  "$(printf '%s\n' "${ids[@]}" | grep -cE "$id_re") $(printf '%s\n' "${ids[@]}" | sort -u | wc -l)"
for ((i = 0; i < 50; i++)); do printf 'CONSUME %s TTR 30\n' "$q"; done >"$tmp/pipe.in"
check "a pipeline of 50 CONSUME answers the jobs in publish order" \
  "$(for ((i = 0; i < 50; i++)); do job_lines "$q" "${ids[i]-}" "job-$i" 0 86400 1; done)" \
  "$(cli <"$tmp/pipe.in" | jobs)"
check "ACK of the 50" 50 "$(cli ACK "$q" "${ids[@]}")"

q=cli-resp-$RANDOM
id3=$(cli PUBLISH "$q" three TRIES 2 TTL 600)
id2=$(cli PUBLISH "$q" two TRIES 2 TTL 600)
check "CONSUME under RESP3 (redis-cli -3) answers the 7-element array" \
  "$(job_lines "$q" "$id3" three 1 600 1)" "$(cli -3 CONSUME "$q" TTR 30 | jobs)"
check "... as under RESP2" "$(job_lines "$q" "$id2" two 1 600 1)" "$(cli CONSUME "$q" TTR 30 | jobs)"
check "ACK of both" 2 "$(cli ACK "$q" "$id3" "$id2")"

# INFO queues: one key per queue, "queue_<ns>/<queue>" with ':' written %3A (docs/commands.md).
for q in "cli-info:a-$RANDOM" "cli-info:b-$RANDOM"; do
  id=$(cli PUBLISH "$q" due PDELAY 50)  # a delayed job, delivered, records its lateness
  cli CONSUME "$q" TTR 30 TIMEOUT 4 >/dev/null
  cli ACK "$q" "$id" >/dev/null
  key=queue_default/${q//:/%3A}
  check "INFO queues has the line of $q, counting its delayed job" "lateness_count=1" \
    "$(cli INFO queues | tr -d '\r' | sed -n "s|^$key:\(lateness_count=[0-9]*\),.*|\1|p")"
done

check "errors: TRIES 0" "ERR value is not an integer or out of range" \
  "$(cli PUBLISH "$q" x TRIES 0 2>&1)"
check "errors: negative TIMEOUT" "ERR timeout is negative" "$(cli CONSUME "$q" TIMEOUT -1 2>&1)"

echo "$passed passed, $failed failed"
((failed == 0))
