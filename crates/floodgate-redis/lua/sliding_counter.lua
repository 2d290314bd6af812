-- Sliding window counter. KEYS[1]: "window current previous", expiring when both counts
-- have left the rolling window. ARGV: now_s|'redis', now_n, cost, pad_ms, limit, W (ns).
-- The core's test prev x (W - e) + (cur + cost) x W <= limit x W is done exactly:
-- with P = prev x (W - e) = qW + r, it holds iff limit - cur - cost >= ceil(P / W).
local s, n = now_of(ARGV[1], ARGV[2])
local cost = tonumber(ARGV[3])
local pad = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local W = tonumber(ARGV[6])
local q, r = tdivmod(s, n, W)
local idx = q + 1
local win, cur, prev = idx, 0, 0
local v = redis.call('GET', KEYS[1])
if v then
  local sw, sc, sp = string.match(v, '^(%d+) (%d+) (%d+)$')
  sw = tonumber(sw)
  if idx <= sw then
    win = sw; cur = tonumber(sc); prev = tonumber(sp)
  elseif idx == sw + 1 then
    prev = tonumber(sc)
  end
end
local elapsed = 0
if win == idx then elapsed = r end
local to_end = W - elapsed
local function reset_of(c, p)
  if c > 0 then return to_end + W elseif p > 0 then return to_end end
  return 0
end
local function wait_for(weight, budget, el)
  local overlap = W
  if weight ~= 0 then
    overlap = muldivmod(budget, W, weight)
    if overlap == nil then overlap = W end
  end
  local e = W - overlap
  if e < 0 then e = 0 end
  e = e - el
  if e < 0 then e = 0 end
  return e
end
local pq, pr = muldivmod(prev, W - elapsed, W)
if pr > 0 then pq = pq + 1 end
local A = limit - cur
local function nonneg(x) if x > 0 then return x end return 0 end
if cost > limit then return { 0, limit, nonneg(A - pq), -1, reset_of(cur, prev), 0, 2 } end
if A - cost < pq then
  local retry
  if cur + cost <= limit then
    retry = wait_for(prev, limit - cur - cost, elapsed)
  else
    retry = to_end + wait_for(cur, limit - cost, 0)
  end
  return { 0, limit, nonneg(A - pq), retry, reset_of(cur, prev), 0, 1 }
end
local ncur = cur + cost
if cost > 0 then
  local ttl = (win - idx + 2) * W - r
  redis.call('SET', KEYS[1], string.format('%d %d %d', win, ncur, prev), 'PX', px(ttl, pad))
end
return { 1, limit, nonneg(A - cost - pq), -1, reset_of(ncur, prev), 0, 0 }
