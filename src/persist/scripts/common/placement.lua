-- common/placement.lua: A job put in its place: ready, dead, delayed, its next occurrence, expiry,
-- a failed attempt, expired leases.

-- Puts a job that is in no place into one (record r is updated and stored).
local function put_ready(K, r, now)
  r.state, r.at, r.ttr = READY, now, nil
  local raw = encode(r)
  redis.call('HSET', jobs_key, K, raw)
  push_ready(K, r.level)
  if count('ready', 1) == 1 then ready_expiry_due(raw) end
  announce_ready()
end

local function put_dead(K, r, now)
  r.state, r.at, r.ttr = DEAD, now, nil
  redis.call('HSET', jobs_key, K, encode(r))
  redis.call('RPUSH', dead_key, K)
  count('dead', 1)
  count('dead_total', 1)
end

-- A delayed record keeps no at_ms: its due time is its bucket position.
local function put_delayed(K, r, due)
  r.state, r.at, r.ttr = DELAYED, nil, nil
  bucket_add(K, due, encode(r), is_derivable(K, due))
  count('delayed', 1)
end

-- A recurring job (in no place) starts its next occurrence with full tries.
local function reschedule(K, r, now)
  drop_error(K, r.attempt, r.state)
  r.occ = next_occurrence(r, now)
  r.tries_left, r.attempt = r.tt, 0
  put_delayed(K, r, r.occ)
end

-- An expired job (in no place) is met: a one-off job is gone, a recurring one moves on.
local function expire(K, r, now)
  count('expired_total', 1)
  if recurring(r) then
    reschedule(K, r, now)
  else
    drop_error(K, r.attempt, r.state)
    retire(K, r, now, 'x')
  end
end

-- A leased job whose attempt failed and that has no try left (its lease already gone from
-- prefix.."l"; K's record still in prefix.."j"). A one-off job goes to the dead letter. An
-- occurrence of a recurring job goes there as a job of its own -- a new K, the occurrence's
-- payload, ttl and tries, no EVERY -- and the schedule goes on at its next occurrence after now
-- with full tries
-- (docs/commands.md EVERY). The new K is a generated id's: its time is now, its shard byte (K[6],
-- queue/model/shards.h) this queue's shard number, so the commands that name it reach this queue, and
-- its other 9 bytes come from SHA-1 of K and the occurrence.
local function fail_for_good(K, r, now, reason)
  if not recurring(r) then
    record_error(K, r.attempt, now, reason)
    put_dead(K, r, now)
    retire(K, r, now, 'd', reason)
    return
  end
  local shard = tonumber(string.match(queue_tag(), '#(%d+)$') or '0')
  local D
  for salt = 0, 9 do
    local h = redis.sha1hex(K .. struct.pack('<I6I1', r.occ, salt))
    local rest = string.gsub(string.sub(h, 1, 18), '%x%x',
                             function(x) return string.char(tonumber(x, 16)) end)
    D = struct.pack('>I6', now) .. string.char(shard % 256) .. rest
    if redis.call('HEXISTS', jobs_key, D) == 0 then break end
  end
  local created = r.created
  if r.occ > created then created = r.occ end  -- its ttl counted from the occurrence (expires_at)
  local copy = {state = DEAD, created = created, ttl = r.ttl, tries_left = 0,
                attempt = r.attempt, tt = r.tt, every = 0, backoff = r.backoff, bmax = r.bmax,
                jitter = r.jitter, level = r.level, payload = r.payload}
  record_error(D, r.attempt, now, reason)
  put_dead(D, copy, now)
  redis.call('HDEL', jobs_key, K)
  reschedule(K, r, now)
end

-- pump.lua (2): leases whose deadline passed (`expired`, their K, already out of prefix.."l"),
-- oldest first: a job past its ttl is removed (recurring: next occurrence); one with tries left is
-- ready again (`make_ready`, pump.lua's: its writes are batched there) or delayed by its BACKOFF;
-- one without dies (fail_for_good). The reason recorded is "lease expired".
local function end_leases(expired, now, make_ready)
  local raws = redis.call('HMGET', jobs_key, unpack(expired))
  for m, K in ipairs(expired) do
    local raw = raws[m]
    if raw and string.byte(raw, 1) % 4 == LEASED then
      local r = decode(raw)
      if is_expired(r, now) then
        redis.call('HDEL', jobs_key, K)
        expire(K, r, now)
        forget_if_empty()  -- the last job gone: the queue leaves the registry (as nack.lua)
      elseif r.tries_left > 0 then
        record_error(K, r.attempt, now, 'lease expired')
        local wait = backoff_ms(r, K, now)
        if wait > 0 then
          redis.call('HDEL', jobs_key, K)
          put_delayed(K, r, now + wait)
        else
          make_ready(K, r)
        end
      else
        fail_for_good(K, r, now, 'lease expired')
      end
    end
  end
end

