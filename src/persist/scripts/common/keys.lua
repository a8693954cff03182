-- common/keys.lua: The queue's keys and the call's state (`bind`), retention, and a queue leaving
-- the registry when empty.

-- Keys. KEYS[1] is the queue's `prefix`, "dq:{ns/queue}:"; every key is prefix .. suffix, so all
-- of them share the hash tag and live in one Redis Cluster slot. Redis runs one function at a
-- time, so these library-level variables are the current call's: `bind` sets them first in every
-- call.
local prefix        -- the queue prefix
local jobs_key      -- HASH  K -> record of a ready, leased, dead or staged job (see entry_live)
local ready_key     -- LIST  ready FIFO of K (lazy: entries whose record is not ready are skipped)
local priority_key  -- ZSET  ready entries of jobs with a priority (level >= 1): highest level
                    -- first, then in order (see push_ready); exact, no stale entries
local leases_key    -- ZSET  K scored by lease deadline (ms)
local dead_key      -- LIST  dead letter of K in order of death (lazy like ready_key)
local buckets_key   -- ZSET  seconds whose bucket prefix .. 'd:' .. SEC is not yet staged
local index_prefix  -- prefix of the index HASHes prefix.."i:"..XXX: K -> due ms for delayed
                    -- jobs whose position is not derivable (index_key)
local stats_key     -- HASH  gauges and counters (see count), the staging mark (stage_sec,
                    -- stage_cursor)
local staged_key    -- ZSET  staged member (see staged_member) -> due ms, staged jobs not yet due
local errors_key    -- HASH  K -> why the job's last attempt failed (see record_error)
local stage_sec_cached  -- prefix.."s" stage_sec, read at most once per call (see stage_sec)
local announced         -- this call already announced ready jobs (see announce_ready)
local ahead_ms          -- the pump's look-ahead, when the call knows it (see due_at)
local created_bucket    -- the earliest second whose bucket this call created (see bucket_add)
local clock_ms          -- this call's now_ms, when it takes one (now_arg): retention needs it
local moved_from_empty  -- move_due found the ready list empty (its jobs were the first ready)
local hush_empty        -- the ready list going empty needs no "empty" news (pump.lua's lease)
local ready_counted     -- the ready gauge changed since the caller cleared this (pump.lua)
-- Per call and queue: whether prefix.."wt" exists (waited_on; nil: not read yet), whether the queue
-- is known to be in the registry (count), the bucket lengths read (bucket_len), whether a lease
-- this call added is sure to be in prefix.."l" (kept by lease_add and leases_remove).
local waited_cached, registered, bucket_lens, lease_added
-- The call is pump.lua's, which writes the queue's due index entry itself at its end (due_at and
-- the ready list's expiry entry have nothing to add) and moves due jobs itself (bring_due).
local in_pump

-- Retention (docs/storage.md "Retention"): a queue that holds no job keeps its counters prefix.."s"
-- (the totals QSTAT and /metrics show) this long, then they go with the pump call at its end.
-- deferq replaces this line with its server.retain_seconds (persist/scripts.cc), which makes the
-- library one of its own (its name carries the value).
local RETAIN_MS = 600000

-- Pool-wide keys, one of each per pool (docs/storage.md "Registry and due index"), given as
-- KEYS[2] and KEYS[3] (deferq passes "dq:queues" and "dq:due"): the queues that hold a job (SET of
-- "ns/queue"), and when each queue's pump has work next (ZSET, ms; a lower bound, made exact by
-- every pump call). The pump owner reads the due index instead of visiting every queue. They are
-- not in the queue's hash slot, so on Redis Cluster the caller leaves them out (every script
-- works without them; the cluster design is in docs/storage.md).
local REGISTRY, DUE

local function bind(keys)
  if keys[1] ~= prefix then  -- pipelined calls on one queue reuse the key names of the last call
    prefix = keys[1]
    jobs_key, ready_key, leases_key = prefix .. 'j', prefix .. 'r', prefix .. 'l'
    dead_key, priority_key, buckets_key = prefix .. 'x', prefix .. 'h', prefix .. 'b'
    index_prefix, stats_key, staged_key, errors_key = prefix .. 'i:', prefix .. 's', prefix .. 'w',
                                                      prefix .. 'e'
    waited_cached, registered, bucket_lens = nil, false, {}
  end
  REGISTRY, DUE = keys[2], keys[3]
  stage_sec_cached, announced, ahead_ms, created_bucket, clock_ms = nil, false, 2000, nil, nil
  ready_counted, lease_added = false, false
end

-- Calls one command with a long argument list in chunks of 1000 (unpack() has a limit; pairs stay
-- whole: 1000 is even).
local function batched(cmd, key, args)
  for i = 1, #args, 1000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
  end
end

-- Leases. Every lease is added and removed by these two, so a call knows whether a lease it added
-- is sure to be in prefix.."l" (lease_added: queue_empty needs no ZCARD then).
local function lease_add(K, deadline)
  redis.call('ZADD', leases_key, deadline, K)
  lease_added = true
end

-- Ends the leases of the K listed (the caller has read or changed their records).
local function leases_remove(list)
  batched('ZREM', leases_key, list)
  lease_added = false
end

local function queue_tag() return string.sub(prefix, 5, -3) end

-- Where in the first half of its look-ahead a queue's buckets are staged (ms after "ahead_ms
-- before the bucket's second"): fixed per queue, spread over queues, so the buckets of 1,000
-- queues falling due in one second are not all staged in the same millisecond (one burst of
-- 1,000 pump calls a second, late jobs behind it). 0 without a look-ahead.
local function stage_spread()
  local half = math.floor((ahead_ms or 0) / 2)
  if half < 1 then return 0 end
  local h = 0
  for i = 1, #prefix do h = (h * 33 + string.byte(prefix, i)) % 65521 end
  return h % half
end

-- A queue with no job in any state leaves the registry and the due index.
local flush_totals  -- defined below (batched calls)
-- For a batch (batch.lua): the lowest due index entry it set (due_at), whether the queue is
-- paused (paused; nothing in a batch pauses or resumes it), and whether some call may have left
-- the queue empty (forget_if_empty runs once, when the batch ends).
local batch_due, batch_paused, batch_forget

-- Whether the queue holds no job in any state.
local function queue_empty()
  if lease_added or redis.call('ZCARD', leases_key) > 0 then return false end
  flush_totals()  -- it reads pd
  local v = redis.call('HMGET', stats_key, 'ready', 'delayed', 'dead', 'pd')
  return tonumber(v[1] or '0') == 0 and tonumber(v[3] or '0') == 0 and
         tonumber(v[2] or '0') + tonumber(v[4] or '0') == 0
end

local paused  -- defined below
local announce_empty  -- defined below

-- An emptied queue leaves the registry (unless paused: QUEUES lists a paused queue until
-- QRESUME) and its retention starts: retain_until in prefix.."s", and the due index entry at that
-- time, when the pump deletes the counters (pump.lua (3)).
local function forget_if_empty()
  if batch_forget ~= nil then batch_forget = true return end
  if not REGISTRY or not queue_empty() then return end
  redis.call('DEL', staged_key)  -- with no delayed job left, every staged entry is stale
  batch_due = nil  -- the due index entry is set here: the batch's next due_at must lower it
  if paused() then return end
  -- A queue that was never listed and has no counters never held a job (consumers waited on it,
  -- its pump was told): there is nothing to keep.
  registered = false
  if redis.call('SREM', REGISTRY, queue_tag()) == 0 and redis.call('EXISTS', stats_key) == 0 then
    return
  end
  local t = (clock_ms or 0) + RETAIN_MS
  redis.call('HSET', stats_key, 'retain_until', string.format('%d', t))
  redis.call('ZADD', DUE, t, queue_tag())
end

