-- qstat.lua -- the queue's gauges and counters (read only).
--
-- KEYS[1]  P  queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common.lua)
-- ARGV     none
--
-- State change: none.
-- Returns: { ready, delayed, leased, dead, published_total, consumed_total, acked_total,
--            expired_total, dead_total, nacked_total, respawned_total, cancelled_total, paused }
--   all integers; zeros for a queue that never had a job. leased = ZCARD P.."l"; paused = 1 while
--   the queue is paused (QPAUSE: the key P.."p" exists).

-- BEGIN common.lua
-- END common.lua

local v = redis.call('HMGET', KS, 'ready', 'delayed', 'dead', 'published_total', 'consumed_total',
                     'acked_total', 'expired_total', 'dead_total', 'nacked_total',
                     'respawned_total', 'cancelled_total', 'pd')
local function n(i) return tonumber(v[i] or '0') end
-- pd: delayed publishes, which count in both the delayed gauge and published_total (common.lua).
return {n(1), n(2) + n(12), redis.call('ZCARD', KL), n(3), n(4) + n(12), n(5), n(6), n(7), n(8),
        n(9), n(10), n(11), redis.call('EXISTS', P .. 'p')}
