-- Leaky bucket, meter or delaying queue (nginx limit_req). KEYS[1]: "level last"
-- (nano-units in the bucket at instant last), expiring when the bucket is empty.
-- ARGV: now_s|'redis', now_n, cost, pad_ms, capacity (burst + 1), a, b (drain rate a/b
-- nano-units per ns), undelayed (level in nano-units passed without delay; -1 = nodelay).
local s, n = now_of(ARGV[1], ARGV[2])
local cost = tonumber(ARGV[3])
local pad = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local a = tonumber(ARGV[6])
local b = tonumber(ARGV[7])
local und = tonumber(ARGV[8])
local capn = cap * E9
local level, ls, ln = 0, 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local d, lt = string.match(v, '^(%d+) (%d+)$')
  level = tonumber(d)
  ls, ln = tparse(lt)
end
local el = tdiff(s, n, ls, ln)
local sl = level -- as stored at `last`
if level > 0 and el > 0 then
  local drained = muldivmod(el, a, b)
  if drained == nil or drained >= level then level = 0 else level = level - drained end
end
if level > capn then level = capn end
local function time_for(u)
  if u == 0 then return 0 end
  local q, r = muldivmod(u, b, a)
  if r > 0 then q = q + 1 end
  return q
end
-- time from now until the flow since `last` reaches u nano-units (0 if already past)
local function from_last(u)
  local d = time_for(u) - el
  if d < 0 then return 0 end
  return d
end
local remaining = fdiv(capn - level, E9)
local reset0 = 0
if level > 0 then reset0 = from_last(sl) end
if cost > cap then return { 0, cap, remaining, -1, reset0, 0, 2 } end
local nl = level + cost * E9
if nl > capn then
  return { 0, cap, remaining, from_last(sl + cost * E9 - capn), reset0, 0, 1 }
end
local delay = 0
if und >= 0 and nl > und then delay = time_for(nl - und) end
local reset = time_for(nl)
if cost > 0 then
  local back = -el
  if back > 0 then
    redis.call('SET', KEYS[1], string.format('%d ', nl) .. tfmt(ls, ln), 'PX', px(back + reset, pad))
  else
    redis.call('SET', KEYS[1], string.format('%d ', nl) .. tfmt(s, n), 'PX', px(reset, pad))
  end
end
return { 1, cap, fdiv(capn - nl, E9), -1, reset, delay, 0 }
