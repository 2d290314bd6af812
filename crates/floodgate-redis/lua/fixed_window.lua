-- Fixed window. KEYS[1]: "window count" (window = index + 1), expiring at the window's end.
-- ARGV: now_s|'redis', now_n, cost, pad_ms, limit, W (ns).
local s, n = now_of(ARGV[1], ARGV[2])
local cost = tonumber(ARGV[3])
local pad = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local W = tonumber(ARGV[6])
local q, r = tdivmod(s, n, W)
local idx = q + 1
local win, used = idx, 0
local v = redis.call('GET', KEYS[1])
if v then
  local sw, sc = string.match(v, '^(%d+) (%d+)$')
  sw = tonumber(sw)
  if idx <= sw then win = sw; used = tonumber(sc) end
end
local remaining = limit - used
if remaining < 0 then remaining = 0 end
local to_end = (win - idx) * W + (W - r)
local reset = 0
if used > 0 then reset = to_end end
if cost > limit then return { 0, limit, remaining, -1, reset, 0, 2 } end
if cost > remaining then return { 0, limit, remaining, to_end, reset, 0, 1 } end
local count = used + cost
if count > 0 then reset = to_end else reset = 0 end
if cost > 0 then
  redis.call('SET', KEYS[1], string.format('%d %d', win, count), 'PX', px(to_end, pad))
end
local left = limit - count -- below 0 while a settle's debt is counted
if left < 0 then left = 0 end
return { 1, limit, left, -1, reset, 0, 0 }
