-- Token bucket. KEYS[1]: "deficit last" (nano-tokens missing at instant last, decimal ns),
-- expiring when the bucket is full again. ARGV: now_s|'redis', now_n, cost, pad_ms,
-- capacity, a, b, where the refill is a/b nano-tokens per ns (the core's
-- count x 10^9 / period, reduced by their gcd on the Rust side).
local s, n = now_of(ARGV[1], ARGV[2])
local cost = tonumber(ARGV[3])
local pad = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local a = tonumber(ARGV[6])
local b = tonumber(ARGV[7])
local capn = cap * E9
local deficit, ls, ln = 0, 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local d, lt = string.match(v, '^(%d+) (%d+)$')
  deficit = tonumber(d)
  ls, ln = tparse(lt)
end
local el = tdiff(s, n, ls, ln)
local sd = deficit -- as stored at `last`
if deficit > 0 and el > 0 then
  local refill = muldivmod(el, a, b)
  if refill == nil or refill >= deficit then deficit = 0 else deficit = deficit - refill end
end
if deficit > capn then deficit = capn end
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
local available = capn - deficit
local remaining = fdiv(available, E9)
local reset0 = 0
if deficit > 0 then reset0 = from_last(sd) end
if cost > cap then return { 0, cap, remaining, -1, reset0, 0, 2 } end
local need = cost * E9
if need > available then
  return { 0, cap, remaining, from_last(sd + need - capn), reset0, 0, 1 }
end
deficit = deficit + need
local reset = time_for(deficit)
if cost > 0 then
  local back = -el -- last' = max(now, last); full at last' + reset
  if back > 0 then
    redis.call('SET', KEYS[1], string.format('%d ', deficit) .. tfmt(ls, ln), 'PX', px(back + reset, pad))
  else
    redis.call('SET', KEYS[1], string.format('%d ', deficit) .. tfmt(s, n), 'PX', px(reset, pad))
  end
end
return { 1, cap, fdiv(capn - deficit, E9), -1, reset, 0, 0 }
