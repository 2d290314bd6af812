-- GCRA (redis-cell's CL.THROTTLE). KEYS[1]: the TAT as decimal ns, expiring at the TAT.
-- ARGV: now_s|'redis', now_n, cost, pad_ms, T (emission interval, ns), tau (ns),
-- capacity (tau = T x capacity). Reply: allowed, limit, remaining, retry_after (ns, -1),
-- reset_after (ns), delay (ns), denial (0 none, 1 rate limited, 2 cost above limit).
-- The hottest script, so it stands alone and is written flat (no prelude of local
-- functions: 3 to 15% less server time per call, scripts/redis-script-costs.sh). Same arithmetic as
-- time.lua: instants as exact (seconds, nanoseconds) pairs, every duration below 2^52 ns,
-- floor divisions corrected by their exact remainder. Redis TIME is read only when
-- ARGV[1] is 'redis'; the arguments the path does not need are not converted.
local a1 = ARGV[1]
local s, n
if a1 == 'redis' then
  local t = redis.call('TIME')
  s = tonumber(t[1])
  n = tonumber(t[2]) * 1000
else
  s = tonumber(a1)
  n = tonumber(ARGV[2])
end
local cost = tonumber(ARGV[3])
local T = tonumber(ARGV[5])
local tau = tonumber(ARGV[6])
local cap = tonumber(ARGV[7])
local ttl0 = 0
local v = redis.call('GET', KEYS[1])
if v then
  local len = #v
  local ts, tn = 0, 0
  if len <= 9 then tn = tonumber(v) else
    ts = tonumber(string.sub(v, 1, len - 9))
    tn = tonumber(string.sub(v, len - 8))
  end
  local ds = ts - s
  if ds > 4000000 then ttl0 = 4503599627370496
  elseif ds >= -4000000 then
    local d = ds * 1000000000 + (tn - n)
    if d > 0 then ttl0 = d end
  end
end
local ttl = ttl0 + cost * T
if cost > cap or ttl > tau then
  local r = 0
  if ttl0 <= tau then
    local a = tau - ttl0
    r = math.floor(a / T)
    local m = a - r * T
    if m < 0 then r = r - 1 elseif m >= T then r = r + 1 end
  end
  if cost > cap then return { 0, cap, r, -1, ttl0, 0, 2 } end
  return { 0, cap, r, ttl - tau, ttl0, 0, 1 }
end
if cost > 0 then
  local m = n + ttl
  local q = math.floor(m / 1000000000)
  local r = m - q * 1000000000
  if r < 0 then q = q - 1; r = r + 1000000000 elseif r >= 1000000000 then q = q + 1; r = r - 1000000000 end
  local ms = math.floor(ttl / 1000000)
  if ms * 1000000 < ttl then ms = ms + 1 end
  if ms < 1 then ms = 1 end
  local val
  if s + q == 0 then val = string.format('%d', r) else val = string.format('%d%09d', s + q, r) end
  redis.call('SET', KEYS[1], val, 'PX', ms + tonumber(ARGV[4]))
end
local a = tau - ttl
local r = math.floor(a / T)
local m = a - r * T
if m < 0 then r = r - 1 elseif m >= T then r = r + 1 end
return { 1, cap, r, -1, ttl, 0, 0 }
