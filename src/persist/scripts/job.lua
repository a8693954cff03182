-- job.lua -- describe one job (read only).
--
-- KEYS[1]  prefix              queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms
-- ARGV[2]  K
-- ARGV[3]  derivable_sec  as in ack.lua ("" for a custom K)
--
-- State change: none (registered no-writes: it answers at maxmemory and while Redis cannot
-- persist). A staged job due by now_ms reads "ready" (due_ms: its due time) whether or not the
-- pump has moved it yet, as consume would find it (common/moving.lua bring_due; while consumers wait,
-- the pump moves it at its due ms and it reads "delayed" until then, as qstat counts it).
-- Returns: nil when K is unknown, else
--   { state, payload, tries_left, attempt, created_ms, due_ms, ttl_left_s, every_s, backoff_s,
--     last_error, last_error_attempt, last_error_ms, cron, tz, priority }
--   state: "delayed" | "ready" | "leased" | "dead"
--   due_ms: delayed -> when it falls due; ready -> when it became ready; leased -> when the lease
--           ends; dead -> when it died
--   ttl_left_s: -1 never expires, 0 when the ttl has passed (the job is dropped when next met);
--   every_s, backoff_s: 0 when unset.
--   last_error: why its last failed attempt failed (NACK REASON, "nacked", "lease expired"), nil
--           when none; last_error_attempt: that attempt; last_error_ms: when (0, 0 when none).
--   cron, tz: a CRON job's spec and zone as published (due_ms is then its next occurrence), nil
--           for any other job. priority: its PRIORITY level, 0 when none.
--   result, finished_ms: nil, 0 for a job that lives. A job gone whose outcome is kept (RETAIN,
--           common/outcomes.lua retire) answers state "finished" | "expired" | "cancelled", payload nil,
--           attempt: its last, due_ms = finished_ms: when, result: ACK's RESULT ("" when none).

-- BEGIN common
-- END common

local now, K, hint = arg_int(ARGV[1]), ARGV[2], ARGV[3]
if not now or not K or not hint then return redis.error_reply('ERR deferq job: bad arguments') end

local loc = find(K, hint ~= '')
if not loc then
  local f = redis.call('GET', result_key(K))
  if not f then return nil end
  local at, attempt, created, pos = struct.unpack('<I6I2I6', f, 2)
  return {OUTCOME_NAME[string.sub(f, 1, 1)] or 'finished', false, 0, attempt, created, at, 0, 0, 0,
          false, 0, 0, false, false, 0, string.sub(f, pos), at}
end
local r, due = loc.r, nil
if loc.state == DELAYED and loc.staged and loc.due <= now and not waited_on() then
  loc.state, due = READY, loc.due  -- due: a move of it would be ready from its due ms
elseif loc.state == DELAYED then
  due = loc.due
elseif loc.state == LEASED then
  due = tonumber(redis.call('ZSCORE', leases_key, K) or '0')
else
  due = r.at or r.created
end
local reason, error_attempt, error_ms = last_error(K, r.attempt, loc.state)
local cron, zone = false, false
if r.sched then
  local sched = decode_schedule(r.sched)
  cron, zone = sched.text, sched.zone
end
return {STATE_NAME[loc.state], r.payload, r.tries_left, r.attempt, r.created, due, ttl_left(r, now),
        r.every, r.backoff, reason, error_attempt, error_ms, cron, zone, r.level, false, 0}
