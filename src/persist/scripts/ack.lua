-- ack.lua -- finish jobs by K, in any state.
--
-- KEYS[1]  P       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common.lua)
-- ARGV[1]  now_ms
-- ARGV[2k], ARGV[2k+1]  (k >= 1) pairs: K, derivable_sec
--          derivable_sec = floor(timestamp(K) / 1000) for a generated K (its first-due bucket), or
--          "" for a custom K. It means "also look in K's own first bucket"; a value that does
--          not match K is an error (nothing written).
--
-- State change per K found (in j, via i, or in its derivable bucket):
--   one-off job, any state                 -> deleted (gauge of its state --)
--   recurring job, ready/leased/dead, or delayed whose occurrence is already due (a BACKOFF wait)
--                                          -> next occurrence: delayed at occurrence + k*every,
--                                             the first one > now_ms, full tries
--   recurring job delayed for an occurrence still in the future -> unchanged (counts as found)
-- acked_total += found.
-- Returns: integer, the number of K found (a K given twice counts once).

-- BEGIN common.lua
-- END common.lua

local now = arg_int(ARGV[1])
if not now or #ARGV % 2 ~= 1 then return redis.error_reply('ERR deferq ack: bad arguments') end
for i = 2, #ARGV, 2 do
  local hint = ARGV[i + 1]
  if hint ~= '' and (not is_generated(ARGV[i]) or
                     tonumber(hint) ~= sec_of(struct.unpack('>I6', ARGV[i]))) then
    return redis.error_reply('ERR deferq ack: derivable_sec does not match K')
  end
end

local found, seen = 0, {}
for i = 2, #ARGV, 2 do
  local K = ARGV[i]
  local raw = not seen[K] and redis.call('HGET', KJ, K)
  local flags = raw and string.byte(raw, 1)
  local loc
  if flags and flags % 4 == LEASED and bit.band(flags, F_E) == 0 then
    -- The usual ACK, a leased one-off job: removed without decoding its record.
    remove({K = K, state = LEASED})
    found = found + 1
  elseif not seen[K] then
    loc = find(K, ARGV[i + 1] ~= '', raw)
  end
  seen[K] = true
  if loc then
    found = found + 1
    local r = loc.r
    if r.every == 0 then
      remove(loc)
    elseif not (loc.state == DELAYED and r.occ > now) then
      remove(loc)
      reschedule(K, r, now)
    end
  end
end
if found > 0 then count('acked_total', found) end
return found
