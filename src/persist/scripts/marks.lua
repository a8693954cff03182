-- marks.lua -- set (or renew) the "somebody waits" marker prefix.."wt" of several queues at once.
--
-- KEYS[1]     the first queue's prefix P; KEYS[2..n] the others' (on a Redis Cluster: of one
--             slot)
-- KEYS[n+1..n+2] optional: the pool's registry and due index (common/keys.lua; unused)
-- ARGV[1]  lease_ms  the marker's life (PX): renewed well before it ends while consumers wait
-- ARGV[2]  n         the number of queues
-- ARGV[3]  news      "1": for each marker this call creates on a queue holding staged jobs
--                    (prefix.."w"), publish "wait ns/queue" on dq:ready (the instance that pumps the
--                    queue moves its due jobs at their due ms from then on, common/moving.lua
--                    waited_on; a queue without staged jobs has nothing the pump put off)
--
-- While a queue's marker exists, the scripts that make its jobs ready announce it on dq:ready
-- (common/moving.lua announce_ready), and the pump keeps its due times to the ms. An instance keeps the
-- marker of every queue it has consumers blocked on, renewing them in batches of this call.
-- State change: prefix.."wt" := 1 PX lease_ms for each queue; news as above.
-- Returns: { created_1, ..., created_n }: 1 where this call created the marker, else 0.

-- BEGIN common
-- END common

local lease, n, news = arg_int(ARGV[1]), arg_int(ARGV[2]), ARGV[3] == '1'
if not lease or lease < 1 or not n or n < 1 or n > #KEYS then
  return redis.error_reply('ERR deferq marks: bad arguments')
end
local out = {}
for i = 1, n do
  local had = redis.call('SET', KEYS[i] .. 'wt', '1', 'PX', lease, 'GET')
  out[i] = had and 0 or 1
  if not had and news and redis.call('EXISTS', KEYS[i] .. 'w') == 1 then
    redis.call('PUBLISH', 'dq:ready', 'wait ' .. string.sub(KEYS[i], 5, -3))
  end
end
return out
