-- pumpers.lua -- the roster of a sharded queue: the deferq instances that share the pumping of
-- its shards. Joins it (or stays in it) and answers who is in it.
--
-- KEYS[1]  prefix         shard 0's prefix "dq:{ns/queue}:" (the roster lives in its slot)
-- KEYS[2..3] optional: the pool's registry and due index (not used)
-- ARGV[1]  instance  id of the calling deferq instance (random, chosen at its start)
-- ARGV[2]  lease_ms  how long the caller stays a member without calling again
--
-- State change: prefix.."pumper:"..instance is set with a PX expiry of lease_ms; the SET
-- prefix.."pumpers" gets the instance and loses every member whose prefix.."pumper:"..id has
-- expired; the SET expires lease_ms after the last call, so a roster nobody renews leaves nothing
-- behind. Returns: the ids of the live members, the caller included, sorted.
--
-- Every instance owns shard i when it is the member at position (i + FNV-1a(tag)) mod n of this
-- list (queue/delivery/shard_pump.h), so instances that read the same roster agree on the owner of each
-- shard. Membership expires on Redis's clock (PX), not on the instances', which need not agree.
-- Not job data: PURGE leaves these keys to expire.

local me, lease = ARGV[1], tonumber(ARGV[2])
if not lease or lease < 1 or not me or me == '' then
  return redis.error_reply('ERR deferq pumpers: bad arguments')
end
local set = KEYS[1] .. 'pumpers'
local member = KEYS[1] .. 'pumper:'
redis.call('SET', member .. me, '1', 'PX', lease)
redis.call('SADD', set, me)
local live = {}
for _, id in ipairs(redis.call('SMEMBERS', set)) do
  if redis.call('EXISTS', member .. id) == 1 then
    live[#live + 1] = id
  else
    redis.call('SREM', set, id)
  end
end
redis.call('PEXPIRE', set, lease)
table.sort(live)
return live
