-- pump.lua -- make due delayed jobs ready and end expired leases.
--
-- KEYS[1]  prefix       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms
-- ARGV[2]  limit   >= 1; bounds the work of one call (see below)
-- ARGV[3]  ahead_ms  optional look-ahead (default 0): buckets are staged this long (whole
--                    seconds) before their second begins, so a busy second's staging is done
--                    before its first job falls due
-- ARGV[4]  lazy_ms   optional (default 0): while no consumer waits on the queue (no prefix.."wt"
--                    marker), due staged jobs may be moved up to this long after their due
--                    time: consume, peek and job move the due ones themselves before reading
--                    (common/moving.lua bring_due) and qstat counts them as ready, so nothing a client
--                    sees changes; fewer, fuller pump calls cost Redis less (docs/storage.md
--                    "Lazy moving"). 0: moved at their due ms, as while a consumer waits.
-- ARGV[5]  serve     optional (default 0): how many jobs the calling instance's consumers blocked
--                    on the queue take now. A call that makes no more ready than that announces
--                    nothing on dq:ready: the caller offers them to its own consumers (one consume
--                    call per job, not one per instance), and announces them itself should they
--                    find nobody there (queue/delivery/waiters.h WaiterOrder::Hold).
-- ARGV[6]  lease_ttr_ms  optional, with ARGV[7]: the lease length of the consumer below
-- ARGV[7]  lease_count   optional (default 0): the calling instance's oldest consumer blocked on
--                    the queue takes up to this many jobs (its COUNT, counted in `serve`). When
--                    the call made jobs ready, it leases them to it in this call, as consume.lua
--                    would (paused: none), instead of a consume call after the answer; its ready
--                    list going empty again within the call is announced to nobody when nothing
--                    was ready before it (no instance heard of these jobs: the channel's last
--                    word on the queue already was "empty").
--
-- Delayed jobs live in 1-second buckets prefix.."d:"..SEC, which cannot be read in due order. So
-- the pump *stages* a bucket shortly before its second begins (ahead_ms): it moves the bucket's
-- records into prefix.."j" as they are (state bits still DELAYED; a non-derivable one gets D = its
-- due time and loses its index entry in prefix.."i:"..XXX) and indexes it in the ZSET prefix.."w"
-- by due ms (member: mark .. due .. K, common/record.lua staged_member), HSCANning at most `limit`
-- fields per call and remembering the cursor in prefix.."s" (stage_sec, stage_cursor). A bucket
-- leaves prefix.."b" (the buckets not yet staged) when staging starts on it; from then on jobs
-- added to its second are staged at once
-- (common/staging.lua bucket_add). When a staged job falls due, only its member moves: ZRANGEBYSCORE +
-- ZREMRANGEBYRANK of prefix.."w", RPUSH to the ready list. The record is not touched: a staged
-- record reached through its member in the ready list is ready (common/record.lua entry_live), and
-- consume leases it in place like any ready record.
--
-- State change:
--   (0) staging (see above): a job whose ttl has already passed is removed instead (recurring:
--       next occurrence), expired_total++.
--   (1) staged jobs due at or before now_ms (ZRANGEBYSCORE w -inf now), in due order:
--       delayed -> ready (RPUSH r; the record keeps its bytes, so at_ms reads as the due time;
--       common/moving.lua move_due, which consume, peek and job run too).
--       A ttl that passes between staging and now is found by consume or by (2b).
--       Jobs the first staging pass (0) finds already due join them directly, not through w.
--   (2) leases with deadline <= now_ms (ZRANGEBYSCORE l -inf now), oldest first:
--       ttl passed -> removed (recurring: next occurrence), expired_total++;
--       tries_left > 0 -> ready, or delayed by BACKOFF s*2^(attempt-1) s (cap 1 day) when set;
--       tries_left == 0 -> dead (RPUSH x, dead_total++); an occurrence of a recurring job
--                          dies as a job of its own and the schedule goes on (common/placement.lua
--                          fail_for_good).
--   (2b) ready jobs at the head of prefix.."r" whose ttl has passed (the head of a FIFO expires first
--       when the queue's jobs share a TTL): removed (recurring: next occurrence), expired_total++;
--       stale head entries dropped.
--   At most `limit` fields are staged and at most `limit` jobs move per call (limit is capped at
--   5000); when leases are due, up to half of `limit` is kept for them, so neither kind starves
--   the other.
--   (3) the queue's entry in the due index dq:due := next_due_ms (removed when -1, and the
--       queue leaves the registry dq:queues when it holds no job). A queue that holds no job
--       keeps its counters prefix.."s" until its retention ends (retain_until, common/keys.lua
--       forget_if_empty; the due index entry points there): then they are deleted.
-- Returns: { made_ready, more, next_due_ms, lateness_ms1, lateness_ms2, ... }, or with lease_count:
--          { made_ready, more, next_due_ms, ready_left, n, lateness_ms1..n, K1, payload1, ... }
--   ready_left   after the lease (consume.lua's ready_left; -1: no lease was tried, nothing was
--                made ready), then the leased jobs in consume.lua's six fields each
--   made_ready   jobs that became ready (wake consumers when > 0)
--   more         1 when due work remains (call again at once), else 0
--   next_due_ms  earliest time pump has work (a staged job's due time, or now + lazy_ms when that
--                is earlier and nobody waits; the start of the next unstaged
--                bucket's second, a lease deadline, or the expiry of the ready list's head); -1
--                when the queue has nothing pending.
--                Call again at that time; it may be a stale entry, then the call just moves on.
--   lateness_ms  one per delayed job made ready in (1): now_ms - due_ms (delivery lateness),
--                but 0 for a lazy move (no consumer waits) of a job staged by an earlier call,
--                which any read would have found ready from its due ms on

-- BEGIN common
-- END common

local now, limit = now_arg(ARGV[1]), arg_int(ARGV[2])
local ahead, lazy = arg_int(ARGV[3] or '0'), arg_int(ARGV[4] or '0')
local serve = arg_int(ARGV[5] or '0')
local lease_ttr, lease_count = arg_int(ARGV[6] or '0'), arg_int(ARGV[7] or '0')
if not now or not limit or limit < 1 or not ahead or not lazy or not serve or not lease_ttr or
   not lease_count or lease_count < 0 or lease_count > 1000 or lease_ttr >= 2 ^ 32 then
  return redis.error_reply('ERR deferq pump: bad arguments')
end
in_pump = true  -- this call writes the due index entry at its end (common/counters.lua due_at)
-- Nothing announced until the end, where the count is known (see serve).
if serve > 0 then announced = true end
-- Whether some consumer waits on the queue (an instance keeps the marker prefix.."wt" alive while
-- it has one blocked here; common/moving.lua announce_ready). Only then do due staged jobs need moving
-- at their due ms; otherwise consume, peek and job move them when they read the queue, and the
-- pump moves them at most `lazy` ms late.
local waited = lazy <= 0 or waited_on()
-- Look-ahead: buckets are staged up to `ahead` seconds before their second begins, so the
-- staging of a busy second is done before its first job falls due.
ahead = math.floor(ahead / 1000)
ahead_ms = ahead * 1000
-- Larger batches would only make one call block Redis longer (and overflow unpack()).
if limit > 5000 then limit = 5000 end
local cur = sec_of(now)
local out = {0, 0, -1}

-- Jobs made ready by this call go out in one HSET and one RPUSH, in order.
local ready_fields, ready_keys, ready_levels = {}, {}, {}
local function make_ready(K, r)
  r.state, r.at, r.ttr = READY, now, nil
  ready_fields[#ready_fields + 1] = K
  ready_fields[#ready_fields + 1] = encode(r)
  ready_keys[#ready_keys + 1] = K
  ready_levels[#ready_levels + 1] = r.level
end

-- (0) Stage buckets, in second order: first every bucket whose second has begun (full budget:
-- their jobs are due), then, after the due work below, the buckets of the next `ahead` seconds
-- with a small budget per call, so a busy second is staged before it begins without making any
-- one call long. Staging moves a bucket's records into prefix.."j" as they are (state bits DELAYED;
-- a non-derivable one gets D = its due time) and indexes them in prefix.."w" by due ms; a job whose
-- ttl has already passed is expired instead. A fully staged bucket is gone and leaves prefix.."b".
local mark = redis.call('HMGET', stats_key, 'stage_sec', 'stage_cursor', 'hseq', 'ready')
local had_priority = mark[3] ~= false  -- prefix.."h" was ever used (push_high): (2b) looks at it
local ready_before = tonumber(mark[4] or '0')  -- the direct lease below
stage_sec_cached = tonumber(mark[1] or '-1')
local ssec, scur = stage_sec_cached, mark[2] or '0'
local moved_mark = false
-- The members this call staged after their due time: until now no read could have found them.
local staged_late = {}
-- The members the first staging pass met at or after their due time: they go to the ready list
-- directly (common/moving.lua move_due), never through prefix.."w" (a sparse bucket is staged by
-- the call made at its first job's due ms: one ZADD and one ZREMRANGEBYRANK fewer per such job).
local direct, direct_ok = {}, true
-- Their records, as staged: (2b) knows the ready list's new head without reading it.
local direct_raw = {}
-- The jobs this call may move from staging (all of `limit` but the share of due leases, below).
local delayed_budget = limit
-- The first bucket not yet staged (prefix.."b" lists only those): read once, then followed (staging
-- takes it, and buckets this call creates are noted by common/staging.lua bucket_add). The first two are
-- read, so staging the first does not read prefix.."b" again to learn the next.
local first_bucket, second_bucket
local function next_bucket()
  if first_bucket == nil and second_bucket ~= nil then
    first_bucket, second_bucket = second_bucket, nil
  elseif first_bucket == nil then
    local b = redis.call('ZRANGE', buckets_key, 0, 1)
    first_bucket = tonumber(b[1]) or false
    -- false: there is no second; nil: it is unknown (read again once the first is taken)
    if #b < 2 then second_bucket = false else second_bucket = tonumber(b[2]) end
  end
  if created_bucket and (not first_bucket or created_bucket < first_bucket) then
    first_bucket = created_bucket
  end
  return first_bucket
end
local function stage(budget, upto)
  while budget > 0 do
    if scur == '0' then
      local nxt = next_bucket()
      if not nxt or nxt > upto then break end
      -- Look-ahead: a sparse bucket waits for its first due job (common/staging.lua SPARSE).
      if nxt > cur and bucket_len(nxt) <= SPARSE then break end
      ssec, first_bucket = nxt, nil
      if created_bucket and created_bucket <= ssec then created_bucket = nil end
      -- The mark moves before the copy, and the bucket leaves prefix.."b" (the list of buckets not
      -- yet staged), so adds to this second from now on are staged directly.
      stage_sec_cached = ssec
      moved_mark = true
      redis.call('ZREM', buckets_key, fmt(ssec))
    elseif ssec > upto then
      break
    end
    local bk = bucket_key(ssec)
    local res = redis.call('HSCAN', bk, scur, 'COUNT', budget)
    scur = res[1]
    local kv = res[2]
    local records, index, gone, unindex, dropped, recurring = {}, {}, {}, {}, 0, {}
    for i = 1, #kv, 2 do
      local f, raw = kv[i], kv[i + 1]
      local due = ssec * 1000 + offset_of_field(f)
      local K, derivable = key_of_field(f, due)
      gone[#gone + 1] = f
      if not derivable then
        unindex[#unindex + 1] = K
        raw = with_at(raw, due, DELAYED)
      end
      local expired = expired_in_place(raw, now)
      local r
      if expired == nil then  -- recurring: the full record
        r = decode(raw)
        expired = is_expired(r, now)
      end
      if expired then
        dropped = dropped + 1
        if r then
          recurring[#recurring + 1] = {K, r}  -- after the bucket and prefix.."i" writes below
        else
          count('expired_total', 1)
          drop_error(K, att_in_place(raw), DELAYED)
          retire_raw(K, raw, now, 'x')
        end
      else
        records[#records + 1] = K
        records[#records + 1] = raw
        local member = staged_member(K, due, level_in_place(raw))
        if due <= now then staged_late[member] = true end
        if due <= now and direct_ok and #direct < delayed_budget then
          direct[#direct + 1] = member
          direct_raw[member] = raw
        else
          index[#index + 1] = fmt(due)  -- a number would be formatted as a float: slower
          index[#index + 1] = member
        end
      end
    end
    if #gone > 0 then
      batched('HDEL', bk, gone)
      bucket_lens[ssec] = nil
    end
    for _, K in ipairs(unindex) do redis.call('HDEL', index_key(K), K) end
    if #records > 0 then
      batched('HSET', jobs_key, records)
      if #index > 0 then batched('ZADD', staged_key, index) end
    end
    if dropped > 0 then count('delayed', -dropped) end
    for _, job in ipairs(recurring) do expire(job[1], job[2], now) end
    -- Done early when the rest of the bucket went meanwhile (it is empty).
    if scur ~= '0' and redis.call('EXISTS', bk) == 0 then scur = '0' end
    budget = budget - math.max(1, #kv / 2)
    moved_mark = true
  end
end
-- Split the budget: due leases may claim up to half of it. The first lease tells whether any is
-- due (and is the lease part of next_due when none is).
local first_lease = redis.call('ZRANGE', leases_key, 0, 0, 'WITHSCORES')
local leases_due = 0
if #first_lease > 0 and tonumber(first_lease[2]) <= now then
  leases_due = redis.call('ZCOUNT', leases_key, '-inf', now)
end
delayed_budget = limit - math.min(leases_due, math.floor(limit / 2))

stage(limit, cur)
direct_ok = false  -- the look-ahead pass below runs after the move

-- (1) Due staged jobs, earliest first: their prefix.."w" members move to the ready list as they
-- are, records untouched (common/record.lua staged_member, entry_live). A ttl that
-- passed between staging and now is found by consume or by (2b) at the head of the list.
-- A member carries its due time (staged_member), so the scores are not asked for.
-- The direct lease: while nothing is ready before them, the first due jobs go from prefix.."w"
-- straight to the waiting consumer (common/moving.lua direct_hold, lease_held) instead of through the
-- ready list and consume.lua: six commands fewer, and the list never goes empty again.
local items, held = move_due(now, delayed_budget - #direct, direct,
                             direct_hold(lease_count, ready_before, now))
local n = #items
for m = 1, n do
  local e = items[m]
  -- Lateness is from the due time to when the job became ready: now, when moved at its due ms
  -- for a waiting consumer or staged by this call; else it was ready from its due ms (a read
  -- would have moved it), so 0.
  if waited or staged_late[e] then
    out[m + 3] = now - struct.unpack('>I6', e, 2)
  else
    out[m + 3] = 0
  end
end

-- (2) Expired leases, oldest deadline first.
local lease_budget = limit - n
local lease_moved = 0
if lease_budget > 0 and leases_due > 0 then
  local expired = redis.call('ZRANGEBYSCORE', leases_key, '-inf', now, 'LIMIT', 0, lease_budget)
  lease_moved = #expired
  if #expired > 0 then
    leases_remove(expired)
    end_leases(expired, now, make_ready)
  end
end

if #ready_keys > 0 then
  if #ready_fields > 0 then batched('HSET', jobs_key, ready_fields) end
  push_levels(ready_keys, ready_levels)
  count('ready', #ready_keys)  -- (2b) finds when the list's head expires
  announce_ready()
end

-- The lease (lease_count): the jobs just made ready go to the waiting consumer in this call.
local leased
local consumed = false  -- consume.lua ran below: it read the ready list's head
if held > 0 then
  -- Nothing else was ready: what is now is the rest of the due jobs and the expired leases.
  leased = lease_held(n - held + #ready_keys, lease_ttr, now)
end
if lease_count > held and n - held + #ready_keys > 0 then
  hush_empty = moved_from_empty and serve > 0 and announced
  consumed = true
  local cb, ssc, ah = created_bucket, stage_sec_cached, ahead_ms  -- consume's bind resets them
  local more = script_consume({KEYS[1], KEYS[2], KEYS[3]},
                              {ARGV[1], ARGV[6], tostring(lease_count - held)})
  created_bucket, stage_sec_cached, ahead_ms, hush_empty = cb, ssc, ah, false
  if type(more) ~= 'table' then return more end  -- an error reply
  if leased then
    leased[1] = more[1]
    for i = 2, #more do leased[#leased + 1] = more[i] end
  else
    leased = more
  end
end

-- (2b) Ready jobs whose ttl has passed, from the head of the ready lists, with what is left of
-- the budget (stale entries met on the way are dropped too). head_expiry: when the first live
-- head expires, for next_due.
-- When nothing was ready before this call (the gauge at 0: both lists are gone) and only due jobs
-- moved by this very call joined them, the head is known without a read: the list is still
-- empty when nothing joined it (no ready count changed), else its head is the first of those jobs.
-- A job this call staged is alive (staging expired the others) and its record is in hand; one
-- that came from prefix.."w" is read by its key (no LINDEX), and when its ttl has passed the
-- general path below removes it. One or two commands fewer for a queue's lone due job. Not after
-- expired leases or consume.lua's lease, which change the lists.
local head_expiry, budget
local head_budget = limit - n - lease_moved
if ready_before == 0 and not had_priority and #ready_keys == 0 and lease_moved == 0 and
   not consumed and head_budget > 0 then
  if n == held then
    if not ready_counted then budget = head_budget end
  elseif moved_from_empty then  -- the first jobs of the lists (move_due)
    local first = items[held + 1]
    if string.byte(first, 1) == 255 then
      local raw = direct_raw[first]
      if not raw then
        -- K is entry_key(first), written out: this body is at Lua's limit of 60 upvalues
        raw = redis.call('HGET', jobs_key, string.sub(first, 8))
        if raw then
          local gone = expired_in_place(raw, now)
          if gone == nil then gone = is_expired(decode(raw), now) end  -- an occurrence
          if gone then raw = nil end
        end
      end
      if raw then head_expiry, budget = raw_expiry(raw), head_budget end
    end
  end
end
if not budget then head_expiry, budget = expire_ready_heads(now, head_budget, had_priority) end

-- (3) Look-ahead staging with a small budget (see (0)).
if ahead > 0 then stage(math.min(128, limit), cur + ahead) end
if moved_mark then redis.call('HSET', stats_key, 'stage_sec', fmt(ssec), 'stage_cursor', scur) end

-- When is there work next?
local next_due = -1
local function consider(t)
  if t and (next_due == -1 or t < next_due) then next_due = t end
end
local w = redis.call('ZRANGE', staged_key, 0, 0, 'WITHSCORES')
if #w > 0 then
  local t = tonumber(w[2])
  if not waited and t < now + lazy then t = now + lazy end
  consider(t)
end
if scur ~= '0' then consider((ssec - ahead) * 1000) end  -- staging of a bucket in progress
local b = next_bucket()
if b and b > cur then
  consider(bucket_due(b))  -- its first due job's ms while sparse, else its look-ahead
elseif b then
  consider((b - ahead) * 1000 + stage_spread())
end
if lease_moved > 0 then first_lease = redis.call('ZRANGE', leases_key, 0, 0, 'WITHSCORES') end
if #first_lease > 0 then consider(tonumber(first_lease[2])) end
if head_expiry then consider(head_expiry + 1) end
if leased and #leased > 1 then consider(now + lease_ttr) end  -- the leases just taken
if budget <= 0 then consider(now) end  -- expired ready jobs may remain

-- The due index follows: the pump owner finds the queue there at next_due.
if not DUE then
elseif next_due == -1 then
  -- Nothing pending. A queue that holds no job (and is not paused) keeps its counters until its
  -- retention ends (common/keys.lua forget_if_empty), the time of this call then: they go now.
  local kept = REGISTRY and not paused() and queue_empty() and
               tonumber(redis.call('HGET', stats_key, 'retain_until') or '0')
  if kept and kept > now then
    redis.call('ZADD', DUE, kept, queue_tag())
  elseif kept and kept > 0 then
    redis.call('DEL', stats_key, errors_key)
    redis.call('ZREM', DUE, queue_tag())
  else
    redis.call('ZREM', DUE, queue_tag())
    forget_if_empty()  -- an emptied queue without retention yet (an older library's) starts one
  end
else
  redis.call('ZADD', DUE, next_due, queue_tag())
end

out[1], out[3] = n + #ready_keys, next_due
if serve > 0 and out[1] > serve then
  announced = false
  announce_ready()
end
if next_due ~= -1 and next_due <= now then out[2] = 1 end
if lease_count == 0 then return out end
local reply = {out[1], out[2], out[3], -1, #out - 3}
if leased then reply[4] = leased[1] end
for i = 4, #out do reply[#reply + 1] = out[i] end
if leased then
  for i = 2, #leased do reply[#reply + 1] = leased[i] end
end
return reply
