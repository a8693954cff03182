-- cancel.lua -- remove jobs by K in any state (delayed, ready, leased, dead); a recurring job is
-- removed with all its future occurrences.
--
-- KEYS[1]  prefix       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms  (when a queue left empty starts its retention, common/keys.lua forget_if_empty)
-- ARGV[2k], ARGV[2k+1]  (k >= 1) pairs: K, derivable_sec (as in ack.lua)
--
-- State change per K found: deleted from wherever it is (gauge of its state --, a lease dropped);
-- cancelled_total += removed. A one-off job with RETAIN keeps its outcome "c" (common/outcomes.lua retire),
-- and one someone waits for (CALL, WAITJOB) is announced.
-- Returns: integer, the number of jobs removed.

-- BEGIN common
-- END common

local now = now_arg(ARGV[1])
if not now or #ARGV % 2 ~= 1 then
  return redis.error_reply('ERR deferq cancel: bad arguments')
end
for i = 2, #ARGV, 2 do
  local hint = ARGV[i + 1]
  if hint ~= '' and (not is_generated(ARGV[i]) or
                     tonumber(hint) ~= sec_of(struct.unpack('>I6', ARGV[i]))) then
    return redis.error_reply('ERR deferq cancel: derivable_sec does not match K')
  end
end

local removed, seen = 0, {}
for i = 2, #ARGV, 2 do
  local K = ARGV[i]
  local loc = not seen[K] and find(K, ARGV[i + 1] ~= '')
  seen[K] = true
  if loc then
    remove(loc)
    if recurring(loc.r) then count('sched', -1) else retire(K, loc.r, now, 'c') end
    removed = removed + 1
  end
end
if removed > 0 then count('cancelled_total', removed) end
return removed
