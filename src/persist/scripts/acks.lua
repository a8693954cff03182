-- acks.lua -- several ACKs of one job each, on one queue, in one call.
--
-- deferq sends a client's pipelined one-id ACKs on a queue (persist/call_batch.h) as one call of
-- this function instead of a batch.lua call of ack.lua per ACK: the same state changes, without
-- a call's fixed cost per ACK (docs/storage.md "Batched calls").
--
-- KEYS[1]  prefix       queue prefix "dq:{ns/queue}:"
-- KEYS[2..3] optional: the pool's registry "dq:queues" and due index "dq:due" (common/keys.lua)
-- ARGV[1]  now_ms
-- ARGV[2k], ARGV[2k+1]  (k >= 1) pairs: K, derivable_sec, as ack.lua's; each pair is one ACK
-- State change: each pair's, in order, exactly as ack.lua with that one pair (a K given twice:
--          the second ACK meets what the first left); acked_total += found, once.
-- Returns: an array with one element per pair: 1 (found) or 0, or an error element for a pair
--          whose derivable_sec does not match its K (that pair changes nothing).
-- Errors (nothing written): "ERR deferq acks: bad arguments".

-- BEGIN common
-- END common

local now = now_arg(ARGV[1])
if not now or #ARGV < 3 or #ARGV % 2 ~= 1 then
  return redis.error_reply('ERR deferq acks: bad arguments')
end
local out, found = {}, 0
batch_begin()
for i = 2, #ARGV, 2 do
  local K, hint = ARGV[i], ARGV[i + 1]
  if ack_hint_ok(K, hint) then
    local f = ack_key(K, hint ~= '', now, nil)
    found = found + f
    out[#out + 1] = f
  else
    out[#out + 1] = redis.error_reply('ERR deferq ack: derivable_sec does not match K')
  end
end
if found > 0 then count('acked_total', found) end
batch_end()
return out
