-- cluster_slots.lua -- which of some hash slots of one Redis Cluster node hold queues.
--
-- The discovery pass of a cluster pool (persist/cluster_pool.h): the due index is read over the
-- slots known to hold queues, and this finds the others, 512 slots per due-index read, with one
-- call of this function per master. Registered with allow-cross-slot-keys, called with no keys.
--
-- KEYS[1]  none: the call names no key (it reads those of the slots it is given)
-- ARGV     the slots' tags
-- State change: none.
-- Returns: per tag, 1 (its registry or its due index exists: a queue there holds a job, is
--          paused, or keeps its counters until its retention ends), 0 (neither does) or -1 (this
--          node does not serve that slot)
local out = {}
for i = 1, #ARGV do
  local r = redis.pcall('EXISTS', 'dq:{' .. ARGV[i] .. '}:queues', 'dq:{' .. ARGV[i] .. '}:due')
  if type(r) == 'number' then out[i] = math.min(r, 1) else out[i] = -1 end
end
return out
