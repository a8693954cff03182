-- ack.lua -- finish jobs by K, in any state.
--
-- KEYS[1]  prefix       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
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
--
-- One-job form (ACK queue id [RESULT bytes] [ATTEMPT n]): ARGV = now_ms, K, derivable_sec,
-- attempt ("": no fence), and for a result "result", result (4 or 6 arguments: the list form has
-- an odd number). With an attempt it acts only while K is leased at that
-- attempt (common/outcomes.lua fenced). The result is what a job with RETAIN keeps and what a CALL waiting
-- for it gets (common/outcomes.lua retire); a job that has neither drops it. Returns 1, 0 when K is not
-- found, or -1 when fenced and K is there in another state or attempt (nothing changes).

-- BEGIN common
-- END common

local now = now_arg(ARGV[1])
if now and (#ARGV == 4 or (#ARGV == 6 and ARGV[5] == 'result')) then
  local K, hint = ARGV[2], ARGV[3]
  if not ack_hint_ok(K, hint) then
    return redis.error_reply('ERR deferq ack: derivable_sec does not match K')
  end
  local raw = redis.call('HGET', jobs_key, K)
  local fence = fenced(raw, ARGV[4])
  if fence then return fence end
  if not raw and ARGV[4] ~= '' then
    if find(K, hint ~= '') then return -1 end  -- delayed: no lease at all
    return 0
  end
  local found = ack_key(K, hint ~= '', now, nil, ARGV[6])
  if found > 0 then count('acked_total', found) end
  return found
end
if not now or #ARGV % 2 ~= 1 then return redis.error_reply('ERR deferq ack: bad arguments') end
for i = 2, #ARGV, 2 do
  if not ack_hint_ok(ARGV[i], ARGV[i + 1]) then
    return redis.error_reply('ERR deferq ack: derivable_sec does not match K')
  end
end

local found, seen = 0, {}
for i = 2, #ARGV, 2 do found = found + ack_key(ARGV[i], ARGV[i + 1] ~= '', now, seen) end
if found > 0 then count('acked_total', found) end
return found
