-- qstat.lua -- the queue's gauges and counters (read only).
--
-- KEYS[1]  prefix  queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms  optional: the staged jobs due by then count as ready, not delayed (the pump
--                  may not have moved them yet: common/moving.lua move_due)
--
-- State change: none.
-- Returns: { ready, delayed, leased, dead, published_total, consumed_total, acked_total,
--            expired_total, dead_total, nacked_total, respawned_total, cancelled_total, paused,
--            undelivered_total, schedules }
--   all integers; zeros for a queue that never had a job. leased = ZCARD prefix.."l"; paused = 1 while
--   the queue is paused (QPAUSE: the key prefix.."p" exists); undelivered_total = leases given back
--   by nack "undo" (their client left before the reply), also counted in consumed_total;
--   schedules = recurring jobs (EVERY, CRON) in the queue, prefix.."s" field sched, counted by
--   publish, cancel, replace and dead-letter delete.

-- BEGIN common
-- END common

local now
if ARGV[1] then
  now = arg_int(ARGV[1])
  if not now then return redis.error_reply('ERR deferq qstat: bad arguments') end
end
return queue_figures(now)
