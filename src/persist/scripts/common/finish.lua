-- common/finish.lua: Finishing a job (ACK).

-- ACK (ack.lua, acks.lua). Whether derivable_sec `hint` is "" or matches generated K.
local function ack_hint_ok(K, hint)
  return hint == '' or (is_generated(K) and tonumber(hint) == sec_of(struct.unpack('>I6', K)))
end

-- Finishes job K in any state; 1 when found, else 0. try_derivable: look in K's own first bucket
-- too (see find). seen: the Ks this call already finished (ack.lua counts a K given twice once), or
-- nil (acks.lua: each K is an ACK of its own). acked_total is the caller's.
local function ack_key(K, try_derivable, now, seen, result)
  if seen then
    if seen[K] then return 0 end
    seen[K] = true
  end
  local raw = redis.call('HGET', jobs_key, K)
  local flags = raw and string.byte(raw, 1)
  if flags and flags % 4 == LEASED and bit.band(flags, FLAG_EVERY) == 0 then
    -- The usual ACK, a leased one-off job: removed without decoding its record. A leased record
    -- always has its T block: the attempt is bytes 14-15 (read with one call: the hot path), and
    -- a zero third u16 with a level byte >= L_NOTIFY marks result flags (has_result_flags).
    local a1, a2, z1, z2, _, _, lv = string.byte(raw, 14, 20)
    if z1 ~= 0 or z2 ~= 0 or lv < L_NOTIFY then
      remove({K = K, state = LEASED, attempt = a1 + 256 * a2})
      return 1
    end
  end
  local loc = find(K, try_derivable, raw)
  if not loc then return 0 end
  local r = loc.r
  if not recurring(r) then
    remove(loc)
    retire(K, r, now, 'f', result)
  elseif not (loc.state == DELAYED and r.occ > now) then
    remove(loc)
    reschedule(K, r, now)
  end
  return 1
end

