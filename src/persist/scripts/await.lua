-- await.lua -- where a job stands for a requester waiting for it to finish (CALL, WAITJOB), and
-- ask to be told when it finishes.
--
-- KEYS[1]  prefix              queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms
-- ARGV[2]  K
-- ARGV[3]  derivable_sec  as in ack.lua ("" for a custom K)
--
-- State change: a one-off job that lives (delayed, ready or leased) is marked L_NOTIFY in its
-- record where it is (nothing else changes), so that the call that finishes it announces it on
-- the pool's channel (common/outcomes.lua retire). Nothing else.
-- Returns:
--   nil                                      K is unknown (never was, or gone with no kept outcome)
--   {"live", state}                          it lives (now marked); state as JOB names it
--   {"recurring"}                            a recurring job (EVERY, CRON): it never finishes
--   {"dead", reason, attempt, died_ms}       in the dead letter (reason: false when none)
--   {outcome, text, attempt, at_ms}          its kept outcome: "finished" (text: ACK's RESULT),
--                                            "expired" or "cancelled" (text "")

-- BEGIN common
-- END common

local now, K, hint = now_arg(ARGV[1]), ARGV[2], ARGV[3]
if not now or not K or #K == 0 or not hint then
  return redis.error_reply('ERR deferq await: bad arguments')
end

local loc = find(K, hint ~= '')
if not loc then
  local f = redis.call('GET', result_key(K))
  if not f then return nil end
  local at, attempt, _, pos = struct.unpack('<I6I2I6', f, 2)
  return {OUTCOME_NAME[string.sub(f, 1, 1)] or 'finished', string.sub(f, pos), attempt, at}
end
local r = loc.r
if recurring(r) then return {'recurring'} end
if loc.state == DEAD then
  local reason, attempt = last_error(K, r.attempt, DEAD)
  return {'dead', reason, attempt, r.at or r.created}
end
if not r.notify then
  -- The record as stored (find's copy may read a staged job as ready), marked.
  local where, field = jobs_key, K
  if loc.sec then where, field = bucket_key(loc.sec), loc.f end
  local stored = decode(redis.call('HGET', where, field))
  stored.notify = true
  redis.call('HSET', where, field, encode(stored))
end
return {'live', STATE_NAME[loc.state]}
