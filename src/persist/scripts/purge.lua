-- purge.lua -- delete every job of the queue in every state, and every key of the queue
-- (counters included; the pause mark only with "drop").
--
-- KEYS[1]  prefix  queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms (unused)
-- ARGV[2]  optional "drop": the pause mark prefix.."p" goes too (NAMESPACE DELETE: nothing of the
--          queue is left)
--
-- State change: all keys prefix..{j,r,l,x,b,s,w}, every bucket prefix.."d:"..SEC listed in
-- prefix.."b" and, when the queue holds delayed jobs, the INDEX_PARTS index parts prefix.."i:"..XXX
-- are UNLINKed (memory is freed in the background, so a big queue does not stall Redis); the queue
-- leaves the registry dq:queues and the due index dq:due, unless it is paused (and not dropped):
-- a paused queue stays listed, as it stays paused.
-- Returns: integer, the number of jobs removed (ready + delayed + leased + dead before the call).

-- BEGIN common
-- END common

local v = redis.call('HMGET', stats_key, 'ready', 'delayed', 'dead', 'pd', 'stage_sec')
local total = tonumber(v[1] or '0') + tonumber(v[2] or '0') + tonumber(v[3] or '0') +
              tonumber(v[4] or '0') + redis.call('ZCARD', leases_key)
-- The bucket being staged has left prefix.."b" (pump.lua); its rest goes too.
if v[5] then redis.call('UNLINK', bucket_key(tonumber(v[5]))) end
local secs = redis.call('ZRANGE', buckets_key, 0, -1)
local batch = {}
for i = 1, #secs do
  batch[#batch + 1] = bucket_key(tonumber(secs[i]))
  if #batch == 500 or i == #secs then
    redis.call('UNLINK', unpack(batch))
    batch = {}
  end
end
redis.call('UNLINK', jobs_key, ready_key, leases_key, dead_key, buckets_key, stats_key,
           staged_key, errors_key, priority_key)
-- Index entries exist only for delayed jobs: without any, its parts cannot exist either.
if tonumber(v[2] or '0') + tonumber(v[4] or '0') > 0 then
  for first = 0, INDEX_PARTS - 1, 512 do
    for i = first, first + 511 do
      batch[i - first + 1] = index_prefix .. string.format('%03x', i)
    end
    redis.call('UNLINK', unpack(batch))
  end
end
local drop = ARGV[2] == 'drop'
if drop then redis.call('DEL', prefix .. 'p') end
if REGISTRY then
  if drop or redis.call('EXISTS', prefix .. 'p') == 0 then
    redis.call('SREM', REGISTRY, queue_tag())
  end
  redis.call('ZREM', DUE, queue_tag())
end
return total
