-- Sliding log. KEYS[1]: "total t1 c1 t2 c2 ..." (units admitted at each instant, decimal
-- ns, oldest first), expiring when the newest entry leaves the window.
-- ARGV: now_s|'redis', now_n, cost, pad_ms, limit, W (ns).
local s, n = now_of(ARGV[1], ARGV[2])
local cost = tonumber(ARGV[3])
local pad = tonumber(ARGV[4])
local limit = tonumber(ARGV[5])
local W = tonumber(ARGV[6])
local total, cnt = 0, 0
local et, es, en, ec = {}, {}, {}, {}
local v = redis.call('GET', KEYS[1])
if v then
  local first = true
  local pending = nil
  for tok in string.gmatch(v, '%d+') do
    if first then
      total = tonumber(tok); first = false
    elseif pending == nil then
      pending = tok
    else
      cnt = cnt + 1
      et[cnt] = pending
      es[cnt], en[cnt] = tparse(pending)
      ec[cnt] = tonumber(tok)
      pending = nil
    end
  end
end
local k, expired = 1, 0
while k <= cnt and tdiff(s, n, es[k], en[k]) >= W do
  expired = expired + ec[k]; k = k + 1
end
local used = total - expired
local remaining = limit - used
if remaining < 0 then remaining = 0 end
local function until_exp(i)
  local d = tdiff(es[i], en[i], s, n) + W
  if d < 0 then return 0 end
  return d
end
local reset = 0
if cnt > 0 then reset = until_exp(cnt) end
if cost > limit then return { 0, limit, remaining, -1, reset, 0, 2 } end
if cost > remaining then
  local need = used + cost - limit
  local freed, retry = 0, reset
  for i = k, cnt do
    freed = freed + ec[i]
    if freed >= need then retry = until_exp(i); break end
  end
  return { 0, limit, remaining, retry, reset, 0, 1 }
end
if cost > 0 then
  local parts = { string.format('%d', used + cost) }
  for i = k, cnt do parts[#parts + 1] = et[i] .. ' ' .. string.format('%d', ec[i]) end
  if cnt >= k and tdiff(es[cnt], en[cnt], s, n) >= 0 then
    parts[#parts] = et[cnt] .. ' ' .. string.format('%d', ec[cnt] + cost)
    reset = until_exp(cnt)
  else
    parts[#parts + 1] = tfmt(s, n) .. ' ' .. string.format('%d', cost)
    reset = W
  end
  redis.call('SET', KEYS[1], table.concat(parts, ' '), 'PX', px(reset, pad))
end
return { 1, limit, remaining - cost, -1, reset, 0, 0 }
