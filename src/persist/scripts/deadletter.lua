-- deadletter.lua -- the queue's dead letter: size, peek, respawn, delete.
--
-- KEYS[1]  prefix       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  op      "size" | "peek" | "respawn" | "respawn_id" | "delete" | "delete_id"
-- ARGV[2]  now_ms
-- ARGV[3]  count   1..1000 (peek, respawn, delete; ignored otherwise, may be "")
-- ARGV[4]  respawn, respawn_id: ttl_s for the respawned jobs (0 = never expire); delete_id: K;
--          peek: "errors" to add each job's last failure (see Returns); else ""
-- ARGV[5]  respawn_id: K
--
-- Dead jobs are taken oldest death first from prefix.."x" (lazy list: entries whose record is not
-- dead are dropped by respawn/delete and skipped by peek; at most count + 1000 entries per call).
-- State change:
--   size, peek  none
--   respawn     dead -> ready: tries_left 1, attempt 0 (a recurring job keeps its tries per
--               occurrence), created_ms := now, ttl := ttl_s, its failure forgotten; RPUSH r;
--               dead--, ready++,
--               respawned_total++. (A dead recurring job is an older library's: a dead
--               occurrence is a one-off job now, common/placement.lua fail_for_good.) ACK of a
--               respawned recurring job resumes it at its next
--               occurrence after now.
--   delete      oldest `count` dead jobs deleted; dead--
--   respawn_id  job K, if it is dead, as respawn does
--   delete_id   job K deleted if it is dead; dead--
-- Returns:
--   size                      integer, dead jobs
--   peek                      { K1, payload1, tries_left1, ttl_left_s1, attempt1, created_ms1, ... }
--                             with "errors", each job followed by reason (false: none),
--                             error_attempt, error_ms (common/outcomes.lua last_error)
--   respawn, delete           integer, jobs moved / deleted
--   respawn_id, delete_id     integer, 1 or 0

-- BEGIN common
-- END common

local op, now, n, arg4 = ARGV[1], now_arg(ARGV[2]), arg_int(ARGV[3]), ARGV[4]
if not now or not arg4 then return redis.error_reply('ERR deferq deadletter: bad arguments') end

-- Dead job K (its record `raw`) back to ready, as respawn describes.
local function respawn(K, raw, ttl)
  count('dead', -1)
  drop_error(K, att_in_place(raw), DEAD)
  local r = decode(raw)
  r.tries_left, r.attempt, r.created, r.ttl = 1, 0, now, ttl
  if not recurring(r) then r.tt = 1 end
  put_ready(K, r, now)
  count('respawned_total', 1)
end

local function ttl_arg(s)
  local ttl = arg_int(s)
  if ttl and ttl < 2 ^ 32 then return ttl end
end

if op == 'size' then
  return tonumber(redis.call('HGET', stats_key, 'dead') or '0')
elseif op == 'delete_id' then
  local raw = redis.call('HGET', jobs_key, arg4)
  if not raw or string.byte(raw, 1) % 4 ~= DEAD then return 0 end
  remove({K = arg4, state = DEAD, attempt = att_in_place(raw)})
  if bit.band(string.byte(raw, 1), FLAG_EVERY) ~= 0 then count('sched', -1) end  -- an older build's
  return 1
elseif op == 'respawn_id' then
  local K, ttl = ARGV[5], ttl_arg(arg4)
  if not K or not ttl then return redis.error_reply('ERR deferq deadletter: bad arguments') end
  local raw = redis.call('HGET', jobs_key, K)
  if not raw or string.byte(raw, 1) % 4 ~= DEAD then return 0 end
  respawn(K, raw, ttl)
  -- Its entry in the dead list is stale now (lazy list): dropped from the head, bounded as remove does.
  local live = tonumber(redis.call('HGET', stats_key, 'dead') or '0')
  if live > 0 then
    trim_head(dead_key, DEAD)
    compact(dead_key, DEAD, live)
  end
  return 1
end

if not n or n < 1 then return redis.error_reply('ERR deferq deadletter: bad count') end

if op == 'peek' then return peek_list(dead_key, DEAD, n, now, false, arg4 == 'errors') end

local ttl
if op == 'respawn' then
  ttl = ttl_arg(arg4)
  if not ttl then return redis.error_reply('ERR deferq deadletter: bad ttl') end
elseif op ~= 'delete' then
  return redis.error_reply('ERR deferq deadletter: unknown op')
end

local done, pops = 0, 0
while done < n and pops < n + 1000 do
  local K = redis.call('LPOP', dead_key)
  if not K then break end
  pops = pops + 1
  local raw = redis.call('HGET', jobs_key, K)
  if raw and string.byte(raw, 1) % 4 == DEAD then
    done = done + 1
    if op == 'delete' then
      count('dead', -1)
      drop_error(K, att_in_place(raw), DEAD)
      redis.call('HDEL', jobs_key, K)
      -- (an older build's)
      if bit.band(string.byte(raw, 1), FLAG_EVERY) ~= 0 then count('sched', -1) end
    else
      respawn(K, raw, ttl)
    end
  end
end
return done
