-- qstat.lua -- the queue's gauges and counters (read only).
--
-- KEYS[1]  P  queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common.lua)
-- ARGV     none
--
-- State change: none.
-- Returns: { ready, delayed, leased, dead, published_total, consumed_total, acked_total,
--            expired_total, dead_total, nacked_total, respawned_total, cancelled_total }
--   all integers; zeros for a queue that never had a job. leased = ZCARD P.."l".

-- BEGIN common.lua
-- END common.lua

return queue_figures()
