-- common/staging.lua: Delayed jobs: buckets per second, their index, staging ahead of the due time,
-- finding and removing a job.

-- Buckets. A generated K is 16 bytes: big-endian u48 first due ms .. 10 random bytes. While the
-- job waits for exactly that due time its field is OFFSET|bit15 .. the 10 random bytes and it has
-- no index entry; otherwise the field is OFFSET .. K and the index holds K -> due ms.
-- The index is split into INDEX_PARTS hashes prefix.."i:"..XXX (XXX: the first three hex digits of
-- SHA-1(K)), so up to ~400,000 indexed jobs per queue each part stays a small listpack-encoded
-- hash (hash-max-listpack-entries 128) and an entry costs ~30 bytes instead of ~100 in one big
-- hash table (docs/storage.md, Memory). The due ms is stored as a decimal integer, which a
-- listpack keeps as a 64-bit integer.
local function is_generated(K) return #K == 16 and string.byte(K, 1) ~= 35 end

local INDEX_PARTS = 4096  -- 16^3: index_key takes three hex digits
local function index_key(K) return index_prefix .. string.sub(redis.sha1hex(K), 1, 3) end

local function is_derivable(K, due)
  return is_generated(K) and struct.unpack('>I6', K) == due
end

local function field_of(K, due, derivable)
  if derivable then return struct.pack('>I2', due % 1000 + DERIVABLE_BIT) .. string.sub(K, 7) end
  return struct.pack('>I2', due % 1000) .. K
end

-- From a bucket field and its due ms back to K (and whether the field is the derivable form).
local function key_of_field(f, due)
  if struct.unpack('>I2', f) >= DERIVABLE_BIT then
    return struct.pack('>I6', due) .. string.sub(f, 3), true
  end
  return string.sub(f, 3), false
end

local function offset_of_field(f) return struct.unpack('>I2', f) % DERIVABLE_BIT end

-- The pump stages every bucket up to stage_sec (see pump.lua): it moves the bucket's records into
-- prefix.."j" (state bits still DELAYED) and indexes them in prefix.."w" by due ms. A job added to
-- such a second is staged at once.
local function stage_sec()
  if stage_sec_cached == nil then
    stage_sec_cached = tonumber(redis.call('HGET', stats_key, 'stage_sec') or '-1')
  end
  return stage_sec_cached
end

-- A bucket of at most SPARSE jobs is staged when its first job falls due, by the pump call that
-- moves that job (the due index points at that ms): one pump call per due job, where staging it
-- ahead would cost one more (1,000 queues with a job or two due per second each). A fuller
-- bucket is staged in the pump's look-ahead, before its second begins, so that no job of a busy
-- second waits for the staging of the others. While prefix.."w" holds fewer than SPARSE members,
-- a job for a second with no bucket makes none: it is staged at once (bucket_add).
local SPARSE = 16

-- The due ms of the first job of the (not yet staged) bucket of second `sec`.
-- HLEN of the bucket of second `sec`, read once per call (bucket_add forgets what it changes).
local function bucket_len(sec)
  local n = bucket_lens[sec]
  if n == nil then
    n = redis.call('HLEN', bucket_key(sec))
    bucket_lens[sec] = n
  end
  return n
end

local function bucket_first_due(sec)
  local first
  for _, f in ipairs(redis.call('HKEYS', bucket_key(sec))) do
    local o = offset_of_field(f)
    if not first or o < first then first = o end
  end
  return sec * 1000 + (first or 0)
end

-- When the pump must look at the bucket of second `sec` (not yet staged): its first job's due
-- ms while it is sparse, else its place in the look-ahead (ahead_ms less the queue's spread
-- before its second).
local function bucket_due(sec)
  if bucket_len(sec) <= SPARSE then return bucket_first_due(sec) end
  return sec * 1000 - ahead_ms + stage_spread()
end

-- Stores a delayed record. nx: only if its place is free (a retried publish of a generated K);
-- returns false, writing nothing, when it is not. prefix.."b" lists the buckets not yet staged, so
-- a job for a second that has one (the usual case) costs one ZSCORE and the write.
-- A job for a second with no bucket is staged at once, like one for a second staged already, while
-- prefix.."w" holds fewer than SPARSE members: a queue with a few delayed jobs keeps them all
-- staged, and its pump moves each at its due ms without staging a bucket first (five commands
-- fewer per job, for one ZCARD at its publish). The record is where the pump would have put it,
-- so nothing else tells the two ways apart.
local function bucket_add(K, due, raw, derivable, nx)
  local sec = sec_of(due)
  local new_bucket = not (batch_buckets and batch_buckets[sec]) and
                     not redis.call('ZSCORE', buckets_key, fmt(sec))
  local staged = new_bucket and sec <= stage_sec()
  if new_bucket and not staged then
    staged = redis.call('ZCARD', staged_key) < SPARSE
    -- A retried publish (nx) of a job staged this way finds it in prefix.."j" even when the queue
    -- has filled up meanwhile.
    if not staged and nx and redis.call('HEXISTS', jobs_key, K) == 1 then return false end
  end
  if staged then
    -- Staged already: the record waits in prefix.."j" (a non-derivable one with D = its due time),
    -- indexed for the pump at its due ms, which the due index must not miss.
    if not derivable then raw = with_at(raw, due, DELAYED) end
    if nx then
      if redis.call('HSETNX', jobs_key, K, raw) == 0 then return false end
    else
      redis.call('HSET', jobs_key, K, raw)
    end
    redis.call('ZADD', staged_key, due, staged_member(K, due, level_in_place(raw)))
    due_at(due)
    if REGISTRY then redis.call('SADD', REGISTRY, queue_tag()) end
    return true
  end
  local f = field_of(K, due, derivable)
  if nx then
    if redis.call('HSETNX', bucket_key(sec), f, raw) == 0 then return false end
  else
    redis.call('HSET', bucket_key(sec), f, raw)
  end
  bucket_lens[sec] = nil
  if new_bucket then
    -- The pump must stage it when its first job falls due (a sparse bucket: SPARSE), and the
    -- queue holds a job.
    redis.call('ZADD', buckets_key, sec, fmt(sec))
    if not created_bucket or sec < created_bucket then created_bucket = sec end
    due_at(due)
    if REGISTRY then redis.call('SADD', REGISTRY, queue_tag()) end
  else
    -- While the bucket is sparse each job's due ms may be its first; once it is not, the
    -- look-ahead stages it (the due index is a lower bound: lowered once, when it fills up).
    local n = bucket_len(sec)
    if n <= SPARSE then
      due_at(due)
    elseif n == SPARSE + 1 then
      due_at(sec * 1000 - ahead_ms + stage_spread())
    end
  end
  if not derivable then redis.call('HSET', index_key(K), K, fmt(due)) end
  if batch_buckets then batch_buckets[sec] = true end
  return true
end

local function bucket_del(K, sec, f, derivable)
  local bk = bucket_key(sec)
  redis.call('HDEL', bk, f)
  if not derivable then redis.call('HDEL', index_key(K), K) end
  if redis.call('HLEN', bk) == 0 then
    redis.call('ZREM', buckets_key, fmt(sec))
    if batch_buckets then batch_buckets[sec] = nil end
  end
end

-- Where is K? Returns nil or a location {K, r (decoded record), state, and for delayed jobs due
-- and either staged (its prefix.."w" member; the record is in prefix.."j") or sec, f (bucket
-- field), derivable}.
-- try_derivable: look in K's own first bucket as a last resort
-- (the caller knows K is a generated id). raw_j: K's value in prefix.."j" when the caller has read
-- it already (false: none), so it is not read twice.
local function find(K, try_derivable, raw_j)
  local raw = raw_j
  if raw == nil then raw = redis.call('HGET', jobs_key, K) end
  if raw then
    local r = decode(raw)
    if r.state == DELAYED then  -- staged: delayed while in prefix.."w", else made ready by the pump
      local due = staged_due(raw, K)
      local member = staged_member(K, due, r.level)
      if redis.call('ZSCORE', staged_key, member) then
        return {K = K, r = r, state = DELAYED, staged = member, due = due}
      end
      r.state, r.at = READY, r.at or due
      return {K = K, r = r, state = READY, entry = member}  -- its ready entry is the member
    end
    return {K = K, r = r, state = r.state}
  end
  local sec, due, f, derivable
  local pos = redis.call('HGET', index_key(K), K)
  if pos then
    due = tonumber(pos)
    sec = sec_of(due)
    derivable = false
  elseif try_derivable and is_generated(K) then
    due = struct.unpack('>I6', K)
    sec = sec_of(due)
    derivable = true
  else
    return nil
  end
  f = field_of(K, due, derivable)
  raw = redis.call('HGET', bucket_key(sec), f)
  if not raw then return nil end
  local r = decode(raw)
  r.state = DELAYED
  return {K = K, r = r, state = DELAYED, sec = sec, f = f, derivable = derivable, due = due}
end

-- Takes a found job out of its place (record, list/zset membership, gauge). Lists are lazy.
local function remove(loc)
  local s, K = loc.state, loc.K
  drop_error(K, loc.attempt or (loc.r and loc.r.attempt) or 0, s)
  if s == DELAYED then
    if loc.staged then
      redis.call('HDEL', jobs_key, K)
      redis.call('ZREM', staged_key, loc.staged)
    else
      bucket_del(K, loc.sec, loc.f, loc.derivable)
    end
    count('delayed', -1)
    return
  end
  redis.call('HDEL', jobs_key, K)
  if s == READY then
    local level = loc.r and loc.r.level or 0
    if level > 0 then redis.call('ZREM', priority_key, loc.entry or K) end
    local live = count('ready', -1)
    if live > 0 and level == 0 then
      trim_head(ready_key, READY)
      compact(ready_key, READY, live)
    end
  elseif s == LEASED then
    leases_remove({K})
    forget_if_empty()
  else
    local live = count('dead', -1)
    if live > 0 then
      trim_head(dead_key, DEAD)
      compact(dead_key, DEAD, live)
    end
  end
end

