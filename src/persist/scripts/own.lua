-- own.lua -- take or keep a pump lease: the pool's, which says which deferq instance reads the
-- pool's due index and pumps its queues.
--
-- KEYS[1]  prefix    the lease is prefix .. "own": deferq passes "dq:", so the pool's lease is
--                    "dq:own" (on Redis Cluster "dq:{dq}:" and "dq:{dq}:own", which need a hash
--                    tag to be a declared key's slot)
-- KEYS[2..3] optional: the pool's registry and due index (not used)
-- ARGV[1]  instance  id of the calling deferq instance (random, chosen at its start)
-- ARGV[2]  lease_ms  lease length
--
-- State change: the lease key, only. Free -> held by `instance` for lease_ms; held by
-- `instance` -> extended to lease_ms from now; held by another instance -> unchanged.
-- Returns: 1 when `instance` holds the lease after the call, else 0.
--
-- Instances that do not hold the lease do not read the due index; the holder does, and runs each
-- queue's pump at its due millisecond, so the Redis work per due job does not grow with the
-- number of instances (the others pump only at the due times of jobs they published). When the
-- holder dies its lease runs out and another instance takes it over. The shards of a sharded
-- queue are owned per shard instead, through the queue's roster (pumpers.lua).

local key = KEYS[1] .. 'own'
local me, lease = ARGV[1], tonumber(ARGV[2])
if not lease or lease < 1 or not me or me == '' then
  return redis.error_reply('ERR deferq own: bad arguments')
end
local holder = redis.call('GET', key)
if holder == false then
  redis.call('SET', key, me, 'PX', lease)
  return 1
end
if holder == me then
  redis.call('PEXPIRE', key, lease)
  return 1
end
return 0
