-- batch.lua -- several calls of one script on one queue, in one call.
--
-- deferq sends a client's consecutive commands of one kind on one queue (a pipeline of
-- PUBLISHes, CONSUMEs or ACKs) as one call of this function instead of one FCALL each, so the
-- fixed cost of an FCALL (argument tables, the function's entry, the reply) and the writes every
-- call repeats (the counters in P.."s", the bucket index lookup) are paid once per batch
-- (docs/storage.md "Batched calls"). Each call still is one whole state change: it runs exactly as
-- a call of that script with those arguments would, in the order given.
--
-- KEYS     as the scripts it runs: KEYS[1] P, KEYS[2..3] optional pool keys (common.lua)
-- ARGV[1]  the script: publish | consume | ack | nack | touch | cancel
-- ARGV[2]  c1, the number of arguments of the first call, then its c1 arguments, then c2, ...
-- State change: each call's own, in order (see its script); the counters that only go up are
--          written once at the end (common.lua batch_begin/batch_end).
-- Returns: an array with each call's reply in order; an error reply is an error element, a null
--          reply a null element.
-- Errors (nothing written): "ERR deferq batch: ..." when the script is not one of the above or the
--          argument counts do not add up.

-- BEGIN common.lua
-- END common.lua

local scripts = {publish = script_publish, consume = script_consume, ack = script_ack,
                 nack = script_nack, touch = script_touch, cancel = script_cancel}
local fn = scripts[ARGV[1]]
if not fn then return redis.error_reply('ERR deferq batch: unknown script') end
-- Every count is checked before the first call writes anything.
local calls, i = {}, 2
while i <= #ARGV do
  local c = arg_int(ARGV[i])
  if not c or i + c > #ARGV then return redis.error_reply('ERR deferq batch: bad argument counts') end
  calls[#calls + 1] = {i + 1, i + c}
  i = i + c + 1
end
if #calls == 0 then return redis.error_reply('ERR deferq batch: no calls') end

local out = {}
batch_begin()
for n, span in ipairs(calls) do
  local reply = fn(KEYS, {unpack(ARGV, span[1], span[2])})
  if reply == nil then reply = false end  -- a null reply; nil would end the array
  out[n] = reply
end
batch_end()
return out
