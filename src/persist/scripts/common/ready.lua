-- common/ready.lua: The ready lists: plain FIFO prefix.."r" and the priority ZSET prefix.."h".

-- Ready entries (a K, or a staged member). A job without a priority joins prefix.."r" (RPUSH); one
-- with a priority (PRIORITY 1..9) joins prefix.."h", scored (10 - level) * 2^40 + a sequence number
-- of the queue (prefix.."s" hseq), so that ZPOPMIN takes the highest level first and, within a
-- level, the oldest entry. levels[i] is entries[i]'s level (1..9).
local LEVEL_SPAN = 1099511627776  -- 2^40
local function push_high(entries, levels)
  local seq = redis.call('HINCRBY', stats_key, 'hseq', #entries) - #entries
  local args = {}
  for i, e in ipairs(entries) do
    args[#args + 1] = (10 - levels[i]) * LEVEL_SPAN + seq + i
    args[#args + 1] = e
  end
  batched('ZADD', priority_key, args)
end

local function push_ready(e, level)
  if level > 0 then return push_high({e}, {level}) end
  redis.call('RPUSH', ready_key, e)
end

-- Ready entries in order, entries[i] of level levels[i]: to prefix.."r" or prefix.."h" (one RPUSH,
-- one ZADD). pump.lua's jobs made ready (plain K).
local function push_levels(entries, levels)
  local plain, high, hl = {}, {}, {}
  for i, e in ipairs(entries) do
    if levels[i] > 0 then
      high[#high + 1], hl[#hl + 1] = e, levels[i]
    else
      plain[#plain + 1] = e
    end
  end
  if #plain > 0 then batched('RPUSH', ready_key, plain) end
  if #high > 0 then push_high(high, hl) end
end

-- A ready entry back at the head of its level (nack.lua "undo": where it was).
local function push_ready_head(e, level)
  if level > 0 then return redis.call('ZADD', priority_key, (10 - level) * LEVEL_SPAN, e) end
  redis.call('LPUSH', ready_key, e)
end

-- Staged members (all of them ready now) to their lists: the level is in each member's mark.
local function push_members(items)
  local levels = {}
  for i, e in ipairs(items) do levels[i] = 255 - string.byte(e, 1) end
  push_levels(items, levels)
end

