-- touch.lua -- extend a lease to now + ttr.
--
-- KEYS[1]  prefix       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms
-- ARGV[2]  K
-- ARGV[3]  ttr_ms  "" = the ttr the lease was taken with (the record's R block)
-- ARGV[4]  attempt optional (TOUCH ... ATTEMPT n): act only while K is leased at that attempt;
--                  -1 when K's record is there in another state or attempt (nothing changes)
--
-- State change, only when K is leased: ZADD l K now+ttr; a new ttr_ms is stored in the record;
--   the queue's dq:due entry lowered to now+ttr.
-- Returns: 1 if K was leased, else 0; -1 for a fenced TOUCH whose attempt is stale.

-- BEGIN common
-- END common

local now, K, ttr = now_arg(ARGV[1]), ARGV[2], ARGV[3]
if not now or not K or not ttr or (ttr ~= '' and (not arg_int(ttr) or tonumber(ttr) >= 2 ^ 32)) then
  return redis.error_reply('ERR deferq touch: bad arguments')
end

local raw = redis.call('HGET', jobs_key, K)
local fence = fenced(raw, ARGV[4])
if fence then return fence end
if not raw or string.byte(raw, 1) % 4 ~= LEASED then return 0 end
local r = decode(raw)
if ttr == '' then
  ttr = r.ttr or 0
else
  ttr = tonumber(ttr)
  if ttr ~= r.ttr then
    r.ttr = ttr
    redis.call('HSET', jobs_key, K, encode(r))
  end
end
lease_add(K, now + ttr)
due_at(now + ttr)  -- a shorter lease than before ends sooner: the pump must come by then
return 1
