-- common/reads.lua: What the read scripts share: the per-job reply, expired ready heads, walks of a
-- lazy list, a queue's figures.

-- The per-job reply shape shared by consume, peek and deadletter peek.
local function push_job(out, K, r, now)
  out[#out + 1] = K
  out[#out + 1] = r.payload
  out[#out + 1] = r.tries_left
  out[#out + 1] = ttl_left(r, now)
  out[#out + 1] = r.attempt
  out[#out + 1] = r.created
end

-- pump.lua (2b): ready jobs whose ttl has passed, from the head of prefix.."r", then of prefix.."h"
-- in a queue that ever had one (has_high), with up to `budget` steps (stale entries met on the way
-- are dropped too). Returns when the first live head expires (nil: none), for next_due, and the
-- budget left.
local function expire_ready_heads(now, budget, has_high)
  local head_expiry
  while budget > 0 do
    local e = redis.call('LINDEX', ready_key, 0)
    if not e then break end
    local K, due = entry_key(e)
    local raw = redis.call('HGET', jobs_key, K)
    if raw and entry_live(raw, K, due, READY) then
      local r = decode(raw)
      if not is_expired(r, now) then
        head_expiry = expires_at(r)
        break
      end
      redis.call('LPOP', ready_key)
      redis.call('HDEL', jobs_key, K)
      count('ready', -1)
      expire(K, r, now)
    else
      redis.call('LPOP', ready_key)
    end
    budget = budget - 1
  end
  while has_high and budget > 0 do
    local z = redis.call('ZRANGE', priority_key, 0, 0)
    if #z == 0 then break end
    local K, due = entry_key(z[1])
    local raw = redis.call('HGET', jobs_key, K)
    if raw and high_live(raw, K, due) then
      local r = decode(raw)
      if not is_expired(r, now) then
        local x = expires_at(r)
        if x and (not head_expiry or x < head_expiry) then head_expiry = x end
        break
      end
      redis.call('ZREM', priority_key, z[1])
      redis.call('HDEL', jobs_key, K)
      count('ready', -1)
      expire(K, r, now)
    else
      redis.call('ZREM', priority_key, z[1])
    end
    budget = budget - 1
  end
  return head_expiry, budget
end

-- Read-only walk of a lazy list (ready_key or dead_key) from its head: up to n live jobs in
-- `state`, in list order, each once (a job that left and came back is met at its first entry),
-- skipping stale entries and, when skip_expired, jobs whose ttl has passed. Looks at most n + the
-- list's stale entries (LLEN - gauge, bounded by compact) + 1000, so it is never short while jobs
-- are live. Returns the per-job reply shape of push_job; with_errors: each job followed by
-- last_error's three values.
local function peek_list(list, state, n, now, skip_expired, with_errors)
  local out, seen = {}, {}
  local got, scanned, start = 0, 0, 0
  -- The ready jobs with a priority come first, in the order CONSUME takes them.
  if list == ready_key then
    for _, e in ipairs(redis.call('ZRANGE', priority_key, 0, n - 1)) do
      local K, due = entry_key(e)
      local raw = redis.call('HGET', jobs_key, K)
      if raw and high_live(raw, K, due) then
        local r = decode(raw)
        if not (skip_expired and is_expired(r, now)) then
          seen[K] = true
          push_job(out, K, r, now)
          got = got + 1
        end
      end
    end
  end
  local live = tonumber(redis.call('HGET', stats_key, STATE_NAME[state]) or '0')
  local bound = n + 1000 + math.max(0, redis.call('LLEN', list) - live)
  while got < n and scanned < bound do
    -- Chunks of up to 100, no larger than needed when there are few stale entries.
    local chunk = redis.call('LRANGE', list, start, start + math.min(99, n - got + 3))
    if #chunk == 0 then break end
    start = start + #chunk
    for _, e in ipairs(chunk) do
      scanned = scanned + 1
      local K, due = entry_key(e)
      if not seen[K] then
        seen[K] = true
        local raw = redis.call('HGET', jobs_key, K)
        if raw and entry_live(raw, K, due, state) then
          local r = decode(raw)
          if not (skip_expired and is_expired(r, now)) then
            push_job(out, K, r, now)
            if with_errors then
              local m = #out
              out[m + 1], out[m + 2], out[m + 3] = last_error(K, r.attempt, r.state)
            end
            got = got + 1
          end
        end
      end
      if got >= n or scanned >= bound then break end
    end
  end
  return out
end

-- The queue's gauges and counters in qstat.lua's reply order (qstat and qstats share them).
-- pd: delayed publishes, which count in both the delayed gauge and published_total.
-- now (ms, optional): the staged jobs due by then count as ready, moved or not, as bring_due
-- would move them (unless consumers wait).
local function queue_figures(now)
  local v = redis.call('HMGET', stats_key, 'ready', 'delayed', 'dead', 'published_total',
                       'consumed_total', 'acked_total', 'expired_total', 'dead_total',
                       'nacked_total', 'respawned_total', 'cancelled_total', 'pd',
                       'undelivered_total', 'sched')
  local function n(i) return tonumber(v[i] or '0') end
  -- sched counts recurring jobs since they were counted (a build before CRON did not: never
  -- below 0 when those are cancelled).
  local sched = math.max(0, n(14))
  local due = 0
  if now and not waited_on() then due = redis.call('ZCOUNT', staged_key, '-inf', now) end
  return {n(1) + due, n(2) + n(12) - due, redis.call('ZCARD', leases_key), n(3), n(4) + n(12),
          n(5), n(6), n(7), n(8), n(9), n(10), n(11), redis.call('EXISTS', prefix .. 'p'), n(13),
          sched}
end

