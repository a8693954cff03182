-- own.lua -- take or keep the pump lease of a queue (one pumping instance per queue).
--
-- KEYS[1]  P         queue prefix "dq:{ns/queue}:" (the lease is P .. "own")
-- ARGV[1]  instance  id of the calling deferq instance (random, chosen at its start)
-- ARGV[2]  lease_ms  lease length
--
-- State change: the lease key, only. Free -> held by `instance` for lease_ms; held by
-- `instance` -> extended to lease_ms from now; held by another instance -> unchanged.
-- Returns: 1 when `instance` holds the lease after the call, else 0.
--
-- Instances that do not hold a queue's lease do not sweep it; the holder sweeps it and runs its
-- pump at each due millisecond, so the Redis work per due job does not grow with the number of
-- instances. When the holder dies its lease runs out and another instance takes it over.

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
