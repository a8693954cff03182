-- pause.lua -- QPAUSE and QRESUME of one queue (of one shard of a sharded queue).
--
-- KEYS[1]  prefix       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  op      "pause" | "resume"
-- ARGV[2]  now_ms  (resume: when an empty queue's retention starts)
--
-- A paused queue is a queue like one that holds jobs: it is in the registry, so QUEUES lists it
-- (an operator sees every pause mark, and QRESUME ends it), NAMESPACE DELETE removes it, and it is
-- never retired while paused. Pausing a queue before its first job is allowed (a deploy pauses
-- its queues before the producers start).
-- State change:
--   pause   prefix.."p" := 1 and the queue is in the registry.
--   resume  prefix.."p" deleted; a queue that holds no job then leaves the registry and its retention
--           starts (common/keys.lua forget_if_empty).
-- Returns: 1 when the call changed the pause state, else 0.

-- BEGIN common
-- END common

local op, now = ARGV[1], now_arg(ARGV[2])
if not now or (op ~= 'pause' and op ~= 'resume') then
  return redis.error_reply('ERR deferq pause: bad arguments')
end
local mark = prefix .. 'p'
if op == 'pause' then
  if redis.call('EXISTS', mark) == 1 then return 0 end
  redis.call('SET', mark, '1')
  if REGISTRY then redis.call('SADD', REGISTRY, queue_tag()) end
  return 1
end
if redis.call('DEL', mark) == 0 then return 0 end
forget_if_empty()
return 1
