-- qstats.lua -- the gauges and counters of several queues in one call (read only): the metrics
-- poller's read (src/queue/stats/queue_stats.h), so reading n queues costs n/100 calls, not n.
--
-- KEYS[1]     the first queue's prefix "dq:{ns/queue}:"; KEYS[2..n] the others' (then the
--             pool-wide keys, unused)
-- ARGV[1]     n
-- ARGV[2]     now_ms, optional: as qstat.lua's
--
-- On a standalone pool the queues may lie in any hash slots. On a Redis Cluster all KEYS must
-- share one slot (Redis refuses the call otherwise: CROSSSLOT), so the poller sends one call per
-- slot, with the queues of that slot (queue_stats.h QstatsBatches).
-- State change: none.
-- Returns: qstat.lua's fifteen figures of each queue, one after the other (15 x n integers).

-- BEGIN common
-- END common

local n, now = tonumber(ARGV[1]), nil
if ARGV[2] then now = arg_int(ARGV[2]) end
if not n or n < 0 or n > #KEYS or (ARGV[2] and not now) then
  return redis.error_reply('ERR deferq qstats: bad arguments')
end
local out = {}
for i = 1, n do
  bind({KEYS[i]})
  for _, x in ipairs(queue_figures(now)) do out[#out + 1] = x end
end
return out
