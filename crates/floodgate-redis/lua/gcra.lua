-- GCRA (redis-cell's CL.THROTTLE). KEYS[1]: the TAT as decimal ns, expiring at the TAT.
-- ARGV: now_s|'redis', now_n, cost, pad_ms, T (emission interval, ns), tau (ns),
-- capacity (tau = T x capacity). Reply: allowed, limit, remaining, retry_after (ns, -1),
-- reset_after (ns), delay (ns), denial (0 none, 1 rate limited, 2 cost above limit).
local s, n = now_of(ARGV[1], ARGV[2])
local cost = tonumber(ARGV[3])
local pad = tonumber(ARGV[4])
local T = tonumber(ARGV[5])
local tau = tonumber(ARGV[6])
local cap = tonumber(ARGV[7])
local ttl0 = 0
local v = redis.call('GET', KEYS[1])
if v then
  local ts, tn = tparse(v)
  local d = tdiff(ts, tn, s, n)
  if d > 0 then ttl0 = d end
end
local function rem(ttl)
  if ttl <= tau then return fdiv(tau - ttl, T) end
  return 0
end
if cost > cap then return { 0, cap, rem(ttl0), -1, ttl0, 0, 2 } end
local ttl = ttl0 + cost * T
if ttl > tau then return { 0, cap, rem(ttl0), ttl - tau, ttl0, 0, 1 } end
if cost > 0 then
  local ts, tn = tadd(s, n, ttl)
  redis.call('SET', KEYS[1], tfmt(ts, tn), 'PX', px(ttl, pad))
end
return { 1, cap, rem(ttl), -1, ttl, 0, 0 }
