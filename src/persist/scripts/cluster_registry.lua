-- cluster_registry.lua -- the registries of some hash slots of one Redis Cluster node, in one
-- call.
--
-- A Redis Cluster keeps the pool-wide registry of queues per slot, "dq:{<slot tag>}:queues"
-- (persist/cluster_slots.h); QUEUES, a new pump owner and the metrics poller read them all
-- (persist/cluster_pool.h ReadRegistry) with one call of this function per master, naming the
-- slots that master serves. Registered with allow-cross-slot-keys and called with no keys.
--
-- KEYS[1]  none: the call names no key (it reads those of the slots it is given)
-- ARGV     the slots' tags
-- State change: none.
-- Returns: {queue tags ("ns/queue"), positions (1-based) of the slot tags whose key this node
--          could not read: it does not serve that slot}
local out, missed = {}, {}
for i = 1, #ARGV do
  local r = redis.pcall('SMEMBERS', 'dq:{' .. ARGV[i] .. '}:queues')
  if r.err then
    missed[#missed + 1] = i
  else
    for j = 1, #r do out[#out + 1] = r[j] end
  end
end
return {out, missed}
