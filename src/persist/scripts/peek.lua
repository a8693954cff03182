-- peek.lua -- the next `count` ready jobs in consume order, without leasing them (read only).
--
-- KEYS[1]  P       queue prefix "dq:{ns/queue}:"
-- ARGV[1]  now_ms
-- ARGV[2]  count   1..1000
--
-- State change: none. Walks P.."r" in chunks of 100, at most count + 1000 entries, skipping stale
-- entries, jobs whose ttl has passed, and second entries of a job (a job that left and came back
-- while an old entry of it was still queued is consumed at its first entry).
-- Returns: { K1, payload1, tries_left1, ttl_left_s1, attempt1, created_ms1, K2, ... }
--   (consume's per-job shape; tries_left is not decremented). Possibly empty.

-- BEGIN common.lua
-- END common.lua

local now, n = arg_int(ARGV[1]), arg_int(ARGV[2])
if not now or not n or n < 1 then return redis.error_reply('ERR deferq peek: bad arguments') end

local out, seen = {}, {}
local got, scanned, start = 0, 0, 0
while got < n and scanned < n + 1000 do
  local chunk = redis.call('LRANGE', KR, start, start + 99)
  if #chunk == 0 then break end
  start = start + #chunk
  for _, K in ipairs(chunk) do
    scanned = scanned + 1
    if not seen[K] then
      seen[K] = true
      local raw = redis.call('HGET', KJ, K)
      if raw and string.byte(raw, 1) % 4 == READY then
        local r = decode(raw)
        if not is_expired(r, now) then
          push_job(out, K, r, now)
          got = got + 1
        end
      end
    end
    if got >= n or scanned >= n + 1000 then break end
  end
end
return out
