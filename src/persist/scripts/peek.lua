-- peek.lua -- the next `count` ready jobs in consume order, without leasing them.
--
-- KEYS[1]  prefix       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms
-- ARGV[2]  count   1..1000
--
-- State change: none (registered no-writes: it answers at maxmemory and while Redis cannot
-- persist). Walks prefix.."r" in chunks of 100, at most count + 1000 entries, skipping stale
-- entries, jobs whose ttl has passed, and second entries of a job (a job that left and came back
-- while an old entry of it was still queued is consumed at its first entry); then, when that is
-- fewer than count, the staged jobs due by now_ms in due order: where the pump's move
-- (common/moving.lua move_due) puts them, whether or not it has run yet (unless consumers wait:
-- then the pump moves them at their due ms, and consume and qstat leave them to it too).
-- Returns: { K1, payload1, tries_left1, ttl_left_s1, attempt1, created_ms1, K2, ... }
--   (consume's per-job shape; tries_left is not decremented). Possibly empty.

-- BEGIN common
-- END common

local now, n = arg_int(ARGV[1]), arg_int(ARGV[2])
if not now or not n or n < 1 then return redis.error_reply('ERR deferq peek: bad arguments') end

local out = peek_list(ready_key, READY, n, now, true)
local want = n - #out / 6
if want > 0 and not waited_on() then
  -- Each member is one staged job (move_due takes them in this order); expired ones are skipped
  -- as in the ready list, so look a little further than `want`.
  local items = redis.call('ZRANGEBYSCORE', staged_key, '-inf', now, 'LIMIT', 0, want + 100)
  for _, member in ipairs(items) do
    local K, due = entry_key(member)
    local raw = redis.call('HGET', jobs_key, K)
    if raw and entry_live(raw, K, due, READY) then
      local r = decode(raw)
      if not is_expired(r, now) then
        push_job(out, K, r, now)
        want = want - 1
        if want == 0 then break end
      end
    end
  end
end
return out
