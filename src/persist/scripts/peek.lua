-- peek.lua -- the next `count` ready jobs in consume order, without leasing them.
--
-- KEYS[1]  P       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common.lua)
-- ARGV[1]  now_ms
-- ARGV[2]  count   1..1000
--
-- State change: staged jobs due by now_ms join the ready list first (common.lua bring_due, as
-- pump.lua's step (1) would), so they show; nothing else. Then walks P.."r" in chunks of 100, at
-- most count + 1000 entries, skipping stale entries, jobs whose ttl has passed, and second
-- entries of a job (a job that left and came back while an old entry of it was still queued is
-- consumed at its first entry).
-- Returns: { K1, payload1, tries_left1, ttl_left_s1, attempt1, created_ms1, K2, ... }
--   (consume's per-job shape; tries_left is not decremented). Possibly empty.

-- BEGIN common.lua
-- END common.lua

local now, n = arg_int(ARGV[1]), arg_int(ARGV[2])
if not now or not n or n < 1 then return redis.error_reply('ERR deferq peek: bad arguments') end

bring_due(now)
return peek_list(KR, READY, n, now, true)
