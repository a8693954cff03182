-- browse.lua -- a queue's delayed or leased jobs in due order, and when its delayed jobs fall due
-- (BROWSE, the console's queue page).
--
-- KEYS[1]  prefix       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  op      "delayed" | "leased" | "due"
-- ARGV[2]  now_ms
-- ARGV[3]  delayed, leased: from_ms (jobs due, or whose lease ends, at or after it);
--          due: step_ms (1..)
-- ARGV[4]  delayed, leased: count 1..1000; due: steps 1..1000
--
-- State change: none (registered no-writes). Bounded: delayed reads the staged jobs due from
-- from_ms (count of them) and then the second buckets from that second on, whole buckets, until
-- count jobs or MAX_FIELDS bucket entries were read; leased reads count entries of the lease
-- index; due counts the staged jobs per step (one ZCOUNT each) and the buckets of the first
-- MAX_BUCKETS seconds that have one within the horizon (one HLEN each), a bucket at its second.
-- Returns:
--   delayed, leased  { K1, due_ms1, payload_head1, payload_len1, tries_left1, attempt1, K2, ... }
--                    in due order (jobs of one ms in no particular order); payload_head: at most
--                    the first HEAD bytes
--   due              { c_1, ..., c_steps, later, complete }: delayed jobs due in
--                    [now + (i-1) * step, now + i * step) (c_1 also counts those already due and
--                    not yet moved), `later` the other delayed jobs, complete 1 unless buckets
--                    past MAX_BUCKETS were left out (then they are in `later`)

-- BEGIN common
-- END common

local HEAD, MAX_FIELDS, MAX_BUCKETS = 200, 5000, 5000

local op, now = ARGV[1], now_arg(ARGV[2])
local a, n = arg_int(ARGV[3]), arg_int(ARGV[4])
if not now or not a or a < 0 or not n or n < 1 or n > 1000 then
  return redis.error_reply('ERR deferq browse: bad arguments')
end

local function push(out, K, due, r)
  out[#out + 1] = K
  out[#out + 1] = due
  out[#out + 1] = string.sub(r.payload, 1, HEAD)
  out[#out + 1] = #r.payload
  out[#out + 1] = r.tries_left
  out[#out + 1] = r.attempt
end

if op == 'leased' then
  local out = {}
  local items = redis.call('ZRANGEBYSCORE', leases_key, a, '+inf', 'WITHSCORES', 'LIMIT', 0, n)
  for i = 1, #items, 2 do
    local K = items[i]
    local raw = redis.call('HGET', jobs_key, K)
    if raw and string.byte(raw, 1) % 4 == LEASED then
      push(out, K, tonumber(items[i + 1]), decode(raw))
    end
  end
  return out
end

if op == 'delayed' then
  local found = {}  -- {due, K, r}
  local items = redis.call('ZRANGEBYSCORE', staged_key, a, '+inf', 'WITHSCORES', 'LIMIT', 0, n)
  for i = 1, #items, 2 do
    local K, due = entry_key(items[i])
    local raw = redis.call('HGET', jobs_key, K)
    if raw and string.byte(raw, 1) % 4 == DELAYED and staged_due(raw, K) == due then
      found[#found + 1] = {due, K, decode(raw)}
    end
  end
  -- Whole buckets in second order until count jobs due from from_ms (a later bucket holds only
  -- later jobs than every earlier one's).
  local fields, in_buckets = 0, 0
  local secs = redis.call('ZRANGEBYSCORE', buckets_key, math.floor(a / 1000), '+inf', 'LIMIT',
                          0, n)
  for _, s in ipairs(secs) do
    if in_buckets >= n or fields >= MAX_FIELDS then break end
    local sec = tonumber(s)
    local all = redis.call('HGETALL', bucket_key(sec))
    fields = fields + #all / 2
    for i = 1, #all, 2 do
      local f = all[i]
      local due = sec * 1000 + offset_of_field(f)
      if due >= a then
        local K = key_of_field(f, due)
        found[#found + 1] = {due, K, decode(all[i + 1])}
        in_buckets = in_buckets + 1
      end
    end
  end
  table.sort(found, function(x, y) return x[1] < y[1] end)
  local out = {}
  for i = 1, math.min(n, #found) do push(out, found[i][2], found[i][1], found[i][3]) end
  return out
end

if op ~= 'due' then return redis.error_reply('ERR deferq browse: unknown op') end
if a < 1 then return redis.error_reply('ERR deferq browse: bad step') end
local counts = {}
for i = 1, n do
  local lo = now + (i - 1) * a
  local hi = '(' .. string.format('%d', now + i * a)
  counts[i] = redis.call('ZCOUNT', staged_key, i == 1 and '-inf' or lo, hi)
end
local complete = 1
local horizon = now + n * a
local secs = redis.call('ZRANGEBYSCORE', buckets_key, '-inf',
                        '(' .. string.format('%d', math.ceil(horizon / 1000)), 'LIMIT', 0,
                        MAX_BUCKETS + 1)
if #secs > MAX_BUCKETS then complete = 0 end
for k = 1, math.min(#secs, MAX_BUCKETS) do
  local sec = tonumber(secs[k])
  local i = math.floor((sec * 1000 - now) / a) + 1
  if i < 1 then i = 1 end
  if i <= n then counts[i] = counts[i] + redis.call('HLEN', bucket_key(sec)) end
end
local counted = 0
for i = 1, n do counted = counted + counts[i] end
-- The delayed gauge is two fields: 'pd' counts what PUBLISH delayed (common/counters.lua).
local d = redis.call('HMGET', stats_key, 'delayed', 'pd')
local delayed = tonumber(d[1] or '0') + tonumber(d[2] or '0')
counts[n + 1] = math.max(0, delayed - counted)
counts[n + 2] = complete
return counts
