-- cluster_due.lua -- the due indexes of some hash slots of one Redis Cluster node, in one call.
--
-- A Redis Cluster keeps the pool-wide due index per slot, "dq:{<slot tag>}:due" (persist/
-- cluster_slots.h); the pump owner reads them all (persist/cluster_pool.h ReadDue) with one call
-- of this function per master, naming the slots that master serves. Registered with
-- allow-cross-slot-keys and called with no keys: it reads keys of many slots of this node.
--
-- KEYS[1]  none: the call names no key (it reads those of the slots it is given)
-- ARGV[1]  min      ZRANGEBYSCORE's min
-- ARGV[2]  max      ZRANGEBYSCORE's max
-- ARGV[3]  count    LIMIT 0 count of each slot's read (-1: all)
-- ARGV[4..] the slots' tags
-- State change: none.
-- Returns: {entries (member, score, member, score, ...), positions (1-based, among the tags) of
--          the tags whose key this node could not read: it does not serve that slot}
local out, missed = {}, {}
for i = 4, #ARGV do
  local r = redis.pcall('ZRANGEBYSCORE', 'dq:{' .. ARGV[i] .. '}:due', ARGV[1], ARGV[2],
                        'WITHSCORES', 'LIMIT', 0, ARGV[3])
  if r.err then
    missed[#missed + 1] = i - 3
  else
    for j = 1, #r do out[#out + 1] = r[j] end
  end
end
return {out, missed}
