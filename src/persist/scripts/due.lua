-- due.lua -- when the queue's pump has work next, as the pool's due index says (read only).
--
-- KEYS[1]  prefix  queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua); without them
--            the answer is nil
-- ARGV     none
--
-- State change: none.
-- Returns: the queue's entry in the due index (ms, an integer), or nil when it has none (no
--   work pending).
--
-- An instance that owns shards of a sharded queue but not the pool's pump reads their entries
-- with this every sweep_ms (queue/delivery/shard_pump.h), instead of the whole due index the pool's pump
-- owner reads. On Redis Cluster KEYS[3] is the due index of the queue's own slot.

-- BEGIN common
-- END common

if not DUE then return nil end
local t = redis.call('ZSCORE', DUE, queue_tag())
if not t then return nil end
return tonumber(t)
