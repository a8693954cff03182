-- consumes.lua -- CONSUME of several queues in one call: up to `count` ready jobs, taken from the
-- queues in the order given (earlier = higher priority), each queue as consume.lua takes them.
--
-- KEYS[1]         the first queue's prefix P, "dq:{ns/queue}:"; KEYS[2..n] the others', in
--                 priority order
-- KEYS[n+1..n+2]  optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms
-- ARGV[2]  ttr_ms  lease length
-- ARGV[3]  count   1..1000, in all
-- ARGV[4]  n       the number of queues (1..1000)
--
-- On a standalone Redis the queues may lie in any hash slots; on a Redis Cluster all n must share
-- one slot (Redis refuses the call otherwise), and deferq sends one call per run of queues of one
-- slot, in order. A CONSUME of 1,000 queues is then one call, not one per queue.
-- State change: per queue, consume.lua's (stale entries dropped, expired jobs removed, jobs
-- leased), until `count` jobs are leased; a queue that stopped at its pop bound on stale entries
-- while jobs are ready is called again (at most 8 times), so the call is never short while jobs
-- are ready.
-- Returns: { ready_left_1, ..., ready_left_n, i1, K1, payload1, tries_left1, ttl_left_s1,
--            attempt1, created_ms1, i2, K2, ... }
--   ready_left_i = queue i's ready gauge after the call (-1: not visited, count was reached
--   before it); each job is consume.lua's six fields preceded by its queue's index i (1-based).

-- BEGIN common
-- END common

local now, ttr, count, n = now_arg(ARGV[1]), arg_int(ARGV[2]), arg_int(ARGV[3]), arg_int(ARGV[4])
if not now or not ttr or not count or count < 1 or count > 1000 or not n or n < 1 or n > 1000 or
   n > #KEYS or ttr >= 2 ^ 32 then
  return redis.error_reply('ERR deferq consumes: bad arguments')
end
local registry, due = KEYS[n + 1], KEYS[n + 2]
local out = {}
for i = 1, n do out[i] = -1 end
local want = count
for i = 1, n do
  if want == 0 then break end
  local keys = {KEYS[i], registry, due}
  local tries = 0
  repeat
    local reply = script_consume(keys, {ARGV[1], ARGV[2], tostring(want)})
    if type(reply) ~= 'table' then return reply end  -- an error reply
    out[i] = reply[1]
    local got = (#reply - 1) / 6
    for j = 2, #reply, 6 do
      out[#out + 1] = i
      for k = 0, 5 do out[#out + 1] = reply[j + k] end
    end
    want = want - got
    tries = tries + 1
  until want == 0 or reply[1] == 0 or tries > 8
end
return out
