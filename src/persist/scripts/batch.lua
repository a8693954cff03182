-- batch.lua -- several calls of one script, on one queue or several, in one call.
--
-- deferq sends a client's consecutive commands of one kind (a pipeline of PUBLISHes, CONSUMEs or
-- ACKs, on one queue or spread over many), and those of several clients met in one loop
-- iteration, as one call of this function instead of one FCALL each, so the fixed cost of an
-- FCALL (argument tables, the function's entry, the reply, a round trip) and the writes every
-- call repeats (the counters in prefix.."s", the bucket index lookup) are paid once per batch, or
-- once per run of calls on one queue (docs/storage.md "Batched calls"). Each call still is one
-- whole state change: it runs exactly as a call of that script with those arguments would, in the
-- order given.
--
-- KEYS[1]         the first queue's prefix prefix; KEYS[2..k] those of the other queues the calls
--                 are on (on a Redis Cluster: of one slot); KEYS[k+1..k+2] optional pool keys
--                 (common/keys.lua)
-- ARGV[1]  the script: publish | consume | ack | nack | touch | cancel
-- ARGV[2]  k, the number of queues
-- ARGV[3]  q1, the queue (1..k) of the first call, then c1, the number of its arguments, then its
--          c1 arguments, then q2, c2, ...
-- State change: each call's own, in order (see its script); the counters that only go up are
--          written once per run of consecutive calls on one queue (common/counters.lua
--          batch_begin/batch_end).
-- Returns: an array with each call's reply in order; an error reply is an error element, a null
--          reply a null element.
-- Errors (nothing written): "ERR deferq batch: ..." when the script is not one of the above or the
--          queue numbers or argument counts do not add up.

-- BEGIN common
-- END common

local scripts = {publish = script_publish, consume = script_consume, ack = script_ack,
                 nack = script_nack, touch = script_touch, cancel = script_cancel}
local fn = scripts[ARGV[1]]
if not fn then return redis.error_reply('ERR deferq batch: unknown script') end
local k = arg_int(ARGV[2])
if not k or k < 1 or k > #KEYS then return redis.error_reply('ERR deferq batch: bad queue count') end
-- Every count is checked before the first call writes anything.
local calls, i = {}, 3
while i <= #ARGV do
  local q, c = arg_int(ARGV[i]), arg_int(ARGV[i + 1] or '')
  if not q or q < 1 or q > k then return redis.error_reply('ERR deferq batch: bad queue number') end
  if not c or i + 1 + c > #ARGV then
    return redis.error_reply('ERR deferq batch: bad argument counts')
  end
  calls[#calls + 1] = {q, i + 2, i + 1 + c}
  i = i + 2 + c
end
if #calls == 0 then return redis.error_reply('ERR deferq batch: no calls') end

local out = {}
local registry, due = KEYS[k + 1], KEYS[k + 2]
local at, keys
for n, call in ipairs(calls) do
  if call[1] ~= at then
    if at then batch_end() end
    at, keys = call[1], {KEYS[call[1]], registry, due}
    batch_begin()
  end
  local reply = fn(keys, {unpack(ARGV, call[2], call[3])})
  if reply == nil then reply = false end  -- a null reply; nil would end the array
  out[n] = reply
end
batch_end()
return out
