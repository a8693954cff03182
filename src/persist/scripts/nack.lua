-- nack.lua -- give a leased job back now.
--
-- KEYS[1]  prefix         queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms
-- ARGV[2]  K
-- ARGV[3]  delay_ms  "" = none (then BACKOFF applies when the job has one); "0" = ready now
-- ARGV[4]  mode      optional; "undo" gives back a lease whose delivery never reached its
--                    consumer (a blocked client left while the consume was in flight): the job
--                    is as before the consume (tries_left+1, attempt-1, nacked_total unchanged)
--                    and goes back to the HEAD of the ready list (of its priority level), where
--                    it was. Counters never
--                    go down: consumed_total keeps the lease, undelivered_total++ counts it as
--                    given back (deliveries = consumed_total - undelivered_total).
--                    "keep" (NACK KEEPTRY, a snooze): the delivery spent no try (tries_left+1,
--                    attempt kept: it was a delivery); no failure is recorded unless a reason
--                    is given; no BACKOFF (ready at once without delay_ms); it never dies.
-- ARGV[5]  reason    optional; why the attempt failed (NACK REASON), at most 512 bytes kept;
--                    "" or absent: "nacked". Recorded with the attempt (common/outcomes.lua
--                    record_error) unless the job expired; not in "undo" mode.
-- ARGV[6]  attempt   optional (NACK ... ATTEMPT n; then ARGV[4] and ARGV[5] are present, "" for
--                    none): act only while K is leased at that attempt; -1 when K's record is
--                    there in another state or attempt (nothing changes).
--
-- State change, only when K is leased (ZREM l; nacked_total++):
--   ttl passed            -> removed (recurring: next occurrence), expired_total++
--   otherwise the failure is recorded (prefix.."e" K; a snooze without a reason records none), then:
--   tries_left > 0        -> delayed until now + delay_ms when delay_ms > 0; else, with no
--                            delay_ms given and BACKOFF s set, delayed s*2^(attempt-1) s (cap 1 day);
--                            else ready (RPUSH r)
--   tries_left == 0       -> dead (RPUSH x, dead++, dead_total++); an occurrence of a recurring
--                            job dies as a new job and K goes on at its next occurrence
--                            (common/placement.lua fail_for_good)
-- Returns: 1 if K was leased, else 0; -1 for a fenced NACK whose attempt is stale.

-- BEGIN common
-- END common

local now, K, delay, mode = now_arg(ARGV[1]), ARGV[2], ARGV[3], ARGV[4] or ''
local reason = ARGV[5] or ''
local snooze = mode == 'keep'
if reason == '' and not snooze then reason = 'nacked' end
if not now or not K or not delay or (delay ~= '' and not arg_int(delay)) or
   (mode ~= '' and mode ~= 'undo' and not snooze) then
  return redis.error_reply('ERR deferq nack: bad arguments')
end

local raw = redis.call('HGET', jobs_key, K)
local fence = fenced(raw, ARGV[6])
if fence then return fence end
if not raw or string.byte(raw, 1) % 4 ~= LEASED then return 0 end
local r = decode(raw)
leases_remove({K})
if mode == 'undo' then
  r.tries_left, r.attempt = r.tries_left + 1, math.max(0, r.attempt - 1)
  r.state, r.at, r.ttr = READY, now, nil
  redis.call('HSET', jobs_key, K, encode(r))
  push_ready_head(K, r.level)
  count('ready', 1)
  count('undelivered_total', 1)  -- the lease never reached a client (never a decrement)
  announce_ready()
  return 1
end
count('nacked_total', 1)
if snooze and r.tries_left < 65535 then r.tries_left = r.tries_left + 1 end
if is_expired(r, now) then
  redis.call('HDEL', jobs_key, K)
  expire(K, r, now)
  forget_if_empty()
elseif r.tries_left > 0 then
  if reason ~= '' then record_error(K, r.attempt, now, reason) end
  local wait = 0
  if delay ~= '' then
    wait = tonumber(delay)
  elseif not snooze then
    wait = backoff_ms(r, K, now)
  end
  if wait > 0 then
    redis.call('HDEL', jobs_key, K)
    put_delayed(K, r, now + wait)
  else
    put_ready(K, r, now)
  end
else
  fail_for_good(K, r, now, reason)
end
return 1
