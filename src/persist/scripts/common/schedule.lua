-- common/schedule.lua: Schedules (CRON spec [TZ zone]): the next occurrence on the civil calendar,
-- as src/schedule/cron.cc finds it.

-- Schedules (CRON spec [TZ zone], docs/commands.md). A cron job's E block is the long form: u32 0,
-- u16 n, then n bytes written by deferq (src/schedule/cron.cc EncodeSchedule): u8 flags (1 seconds
-- field, 2 day-of-month "*", 4 day-of-week "*", 8 the zone has daylight saving time), the fields'
-- bit masks (seconds and minutes as two u32 each, hours u32, days u32, months u16, weekdays u8),
-- the zone's rule (i32 standard and daylight offsets in seconds east of UTC, then the change into
-- daylight saving time and the one out of it: u8 kind, month, week, weekday, u16 day, i32 time),
-- and the spec and zone name as given (u8 length each). The search below is cron.cc's, step for
-- step, on the civil calendar (days since 1970-01-01 of local wall-clock dates).
local function idiv(a, b) return math.floor(a / b) end

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = idiv(y, 400)
  local yoe = y - era * 400
  local mp = m + 9
  if m > 2 then mp = m - 3 end
  local doe = yoe * 365 + idiv(yoe, 4) - idiv(yoe, 100) + idiv(153 * mp + 2, 5) + d - 1
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = idiv(z, 146097)
  local doe = z - era * 146097
  local yoe = idiv(doe - idiv(doe, 1460) + idiv(doe, 36524) - idiv(doe, 146096), 365)
  local doy = doe - (365 * yoe + idiv(yoe, 4) - idiv(yoe, 100))
  local mp = idiv(5 * doy + 2, 153)
  local m = mp - 9
  if mp < 10 then m = mp + 3 end
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m, doy - idiv(153 * mp + 2, 5) + 1
end

local function is_leap(y) return y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0) end
local MONTH_DAYS = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
local function month_days(y, m)
  if m == 2 and is_leap(y) then return 29 end
  return MONTH_DAYS[m]
end

local function has_bit(mask, v) return bit.band(mask, bit.lshift(1, v)) ~= 0 end

local function decode_schedule(b)
  local s = {}
  local flags, pos
  flags, s.slo, s.shi, s.mlo, s.mhi, s.hours, s.days, s.months, s.wdays, s.std, s.dst, pos =
      struct.unpack('<BI4I4I4I4I4I4I2Bi4i4', b)
  s.with_seconds, s.days_any = bit.band(flags, 1) ~= 0, bit.band(flags, 2) ~= 0
  s.wdays_any, s.has_dst = bit.band(flags, 4) ~= 0, bit.band(flags, 8) ~= 0
  s.start, s.stop = {}, {}
  for _, c in ipairs({s.start, s.stop}) do
    c.kind, c.month, c.week, c.wday, c.day, c.time, pos = struct.unpack('<BBBBI2i4', b, pos)
  end
  local n = string.byte(b, pos)
  s.text = string.sub(b, pos + 1, pos + n)
  pos = pos + 1 + n
  s.zone = string.sub(b, pos + 1, pos + string.byte(b, pos))
  return s
end

-- The UTC second of a zone change in `year`, the offset before it being `before`.
local function change_at(c, year, before)
  local day
  if c.kind == 0 then
    local first = days_from_civil(year, c.month, 1)
    local d = 1 + (c.wday - (first + 4) % 7 + 7) % 7 + (c.week - 1) * 7
    while d > month_days(year, c.month) do d = d - 7 end
    day = first + d - 1
  elseif c.kind == 1 then
    day = days_from_civil(year, 1, 1) + c.day - 1
    if is_leap(year) and c.day >= 60 then day = day + 1 end
  else
    day = days_from_civil(year, 1, 1) + c.day
  end
  return day * 86400 + c.time - before
end

local function offset_at(s, t)
  if not s.has_dst then return s.std end
  local year = civil_from_days(idiv(t + s.std, 86400))
  local a, b = change_at(s.start, year, s.std), change_at(s.stop, year, s.dst)
  local dst
  if a < b then dst = t >= a and t < b else dst = not (t >= b and t < a) end
  if dst then return s.dst end
  return s.std
end

local function day_matches(s, days)
  local _, _, d = civil_from_days(days)
  local dom, dow = has_bit(s.days, d), has_bit(s.wdays, (days + 4) % 7)
  if not s.days_any and not s.wdays_any then return dom or dow end
  return dom and dow
end

-- The first civil second after c that the fields match (nil: none within the bound).
local function next_civil(s, c)
  local t
  if s.with_seconds then t = c + 1 else t = (idiv(c, 60) + 1) * 60 end
  for _ = 1, 20000 do
    local days = idiv(t, 86400)
    local sod = t - days * 86400
    local y, m = civil_from_days(days)
    local h, mi, sec = idiv(sod, 3600), idiv(sod, 60) % 60, sod % 60
    if not has_bit(s.months, m) then
      if m == 12 then y, m = y + 1, 1 else m = m + 1 end
      t = days_from_civil(y, m, 1) * 86400
    elseif not day_matches(s, days) then
      t = (days + 1) * 86400
    elseif not has_bit(s.hours, h) then
      t = days * 86400 + (h + 1) * 3600
    elseif not (mi < 32 and has_bit(s.mlo, mi) or mi >= 32 and has_bit(s.mhi, mi - 32)) then
      t = days * 86400 + h * 3600 + (mi + 1) * 60
    elseif not (sec < 32 and has_bit(s.slo, sec) or sec >= 32 and has_bit(s.shi, sec - 32)) then
      t = t + 1
    else
      return t
    end
  end
  return nil
end

-- The first change of the zone's offset after UTC second u.
local function next_change(s, u)
  local year = civil_from_days(idiv(u + s.std, 86400))
  local best
  for y = year - 1, year + 1 do
    for _, at in ipairs({change_at(s.start, y, s.std), change_at(s.stop, y, s.dst)}) do
      if at > u and (not best or at < best) then best = at end
    end
  end
  return best
end

-- Hour "*": the wall clock of whichever offset is in force (cron.cc NextByEitherOffset).
local function next_by_either_offset(s, t)
  local best
  for _, off in ipairs({s.std, s.dst}) do
    local u = t
    for _ = 1, 8 do
      local c = next_civil(s, u + off)
      if not c then break end
      if offset_at(s, c - off) == off then
        if not best or c - off < best then best = c - off end
        break
      end
      u = next_change(s, c - off) - 1
    end
  end
  return best
end

-- The first occurrence after after_ms (ms), nil when none. A wall-clock time that does not exist
-- fires at the first instant after the change; one that happens twice fires at its first instance
-- only; with the hour field "*", the wall clock of whichever offset is in force (cron.h).
local function cron_next(s, after_ms)
  local t = idiv(after_ms, 1000)
  if s.hours == 16777215 and s.has_dst then
    local u = next_by_either_offset(s, t)
    return u and u * 1000
  end
  local c = t + offset_at(s, t)
  for _ = 1, 4000 do
    c = next_civil(s, c)
    if not c then return nil end
    local a, b = c - s.std, c - s.dst
    local a_ok = offset_at(s, a) == s.std
    local b_ok = s.has_dst and offset_at(s, b) == s.dst
    local first
    if a_ok and b_ok then
      first = math.min(a, b)  -- the repeated hour: its first pass
    elseif a_ok or b_ok then
      if a_ok then first = a else first = b end
    else
      local lo, hi = math.min(a, b), math.max(a, b)
      local lo_off = offset_at(s, lo)
      while hi - lo > 1 do
        local mid = lo + idiv(hi - lo, 2)
        if offset_at(s, mid) == lo_off then lo = mid else hi = mid end
      end
      first = hi
    end
    if first > t then return first * 1000 end
  end
  return nil
end

-- The first occurrence after now: the cron schedule's, or on the EVERY grid (occurrence +
-- k * every, k >= 1). A schedule without one left (a century's bound) ends: the job is
-- put a century ahead, where CANCEL finds it.
local function next_occurrence(r, now)
  if r.sched then return cron_next(decode_schedule(r.sched), now) or now + 3155760000000 end
  local period = r.every * 1000
  local k = math.floor((now - r.occ) / period) + 1
  if k < 1 then k = 1 end
  return r.occ + k * period
end

