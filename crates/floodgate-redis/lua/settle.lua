-- Reserve at an estimate and settle at the actual cost, one atomic call each. Appended to
-- the prelude and to ALG, the per-algorithm scripts each wrapped as function(KEYS, ARGV)
-- (scripts.rs), so a reservation is decided by the same code as a check.
-- KEYS[1]: the key. ARGV: op ('reserve' or 'settle'), now_s|'redis', now_n, the
-- algorithm's index in ALG, pad_ms, estimate, at_s, at_n, actual, then the algorithm's
-- parameters (its single script's ARGV[5..]).
-- 'reserve': the check at the estimate; an estimate of 0 is admitted only while a unit
-- is left (decided at cost 1 and put back). Reply: now_s, now_n (the instant charged),
-- 1 when the reply is that of the probe at cost 1 (denied) or else 0, then the check's
-- reply.
-- 'settle': the core's Settle (floodgate-core settle/algorithms.rs), the same arithmetic
-- exactly: the difference is charged into debt or refunded within what of the charge
-- still counts. Reply: status (0 done; 1 the debt would leave the exact range, nothing
-- changed), units charged, units refunded, then the check's reply at cost 0.
-- Exactness: estimate <= limit and (actual - estimate) x 10^9 below 2^50 (scripts.rs
-- checks both), so every amount stays an exact integer below 2^53.
local op = ARGV[1]
local s, n
if ARGV[2] == 'redis' then
  local t = redis.call('TIME')
  s = t[1] + 0
  n = t[2] * 1000
else
  s = ARGV[2] + 0
  n = ARGV[3] + 0
end
local alg = ARGV[4] + 0
local pad = ARGV[5] + 0
local est = ARGV[6] + 0
local ats, atn = ARGV[7] + 0, ARGV[8] + 0
local actual = ARGV[9] + 0
local P = {}
for i = 10, #ARGV do P[#P + 1] = ARGV[i] + 0 end
local key = KEYS[1]
local function check(cost)
  local a = { s, n, cost, pad }
  for i = 1, #P do a[4 + i] = P[i] end
  return ALG[alg]({ key }, a)
end
local function flat(head, r)
  if type(r) == 'number' then head[#head + 1] = r; return head end
  for j = 1, #r do head[#head + 1] = r[j] end
  return head
end

if op == 'reserve' then
  if est == 0 then
    local v, ttl = redis.call('GET', key), redis.call('PTTL', key)
    local r = check(1)
    local ok
    if type(r) == 'number' then ok = r >= 0 else ok = r[1] == 1 end
    if ok then
      if not v then redis.call('DEL', key)
      elseif ttl > 0 then redis.call('SET', key, v, 'PX', ttl)
      else redis.call('SET', key, v) end
    else
      return flat({ s, n, 1 }, r)
    end
  end
  return flat({ s, n, 0 }, check(est))
end

local extra, refund = 0, 0
if actual > est then extra = actual - est else refund = est - actual end
local charged, refunded = 0, 0
local OUT = 1 -- status: the debt would leave the exact range

-- GCRA: P = T, tau. Stored TAT: struct '>I5I7' (seconds, nanoseconds + lead), or the
-- previous decimal nanoseconds.
local function gcra()
  local T = P[1]
  local lead = 0
  local v = redis.call('GET', key)
  if v then
    local ts, tn
    if string.byte(v) < 48 then ts, tn = struct.unpack('>I5I7', v) else
      ts, tn = tparse(v)
    end
    local d = tdiff(ts, tn, s, n)
    if d > 0 then lead = d end
  end
  if extra > 0 then
    lead = lead + extra * T
    if lead >= 9007198180999168 then return OUT end -- 2^53 - 2^30
    charged = extra
  else
    local x = refund * T
    local e = tdiff(ats, atn, s, n) + est * T -- the charge's end, after now
    if e < x then x = e end
    if lead < x then x = lead end
    if x <= 0 then return 0 end
    lead = lead - x
    refunded = fdiv(x, T)
  end
  if lead == 0 then redis.call('DEL', key); return 0 end
  local ms = (lead - lead % 1000000) / 1000000 + 1 + pad
  redis.call('SET', key, struct.pack('>I5I7', s, n + lead), 'PX', ms)
  return 0
end

-- Token and leaky bucket: "value last", value nano-units as of last, at most cap x 10^9,
-- moving to 0 at a/b nano-units per ns (P = cap, a, b[, undelayed]). Debt is a full
-- bucket whose last lies after now.
local function continuous()
  local capn, a, b = P[1] * E9, P[2], P[3]
  local value, ls, ln = 0, s, n
  local v = redis.call('GET', key)
  if v then
    local d, lt = string.match(v, '^(%d+) (%d+)$')
    value = tonumber(d)
    ls, ln = tparse(lt)
  end
  local el = tdiff(s, n, ls, ln)
  local bs, bn = s, n -- base = max(now, last)
  if el < 0 then bs, bn = ls, ln
  elseif value > 0 and el > 0 then
    local drained = muldivmod(el, a, b)
    if drained == nil or drained >= value then value = 0 else value = value - drained end
  end
  if value > capn then value = capn end
  local function time_for(u)
    if u == 0 then return 0 end
    local q, r = muldivmod(u, b, a)
    if q == nil then return BIG end
    if r > 0 then q = q + 1 end
    return q
  end
  if extra > 0 then
    local total = value + extra * E9
    charged = extra
    if total > capn then
      local debt = time_for(total - capn)
      local ahead = tdiff(bs, bn, s, n) + debt -- the new last, after now
      if ahead >= 1125899906842624 then return OUT end -- 2^50
      bs, bn = tadd(s, n, ahead)
      total = capn
    end
    value = total
  else
    local left = est * E9
    local since = tdiff(s, n, ats, atn)
    if since > 0 then
      local drained = muldivmod(since, a, b)
      if drained == nil or drained >= left then left = 0 else left = left - drained end
    end
    local x = refund * E9
    if left < x then x = left end
    local given = 0
    if el < 0 and value >= capn then
      local back = muldivmod(x, b, a)
      if back == nil or back > -el then back = -el end
      local freed = muldivmod(back, a, b)
      if freed == nil or freed > x then freed = x end
      given = freed
      if back < -el then
        x = 0
        bs, bn = tadd(s, n, -el - back)
      else
        x = x - freed
        bs, bn = s, n
      end
    end
    if x > value then x = value end
    value = value - x
    refunded = fdiv(given + x, E9)
  end
  local ahead = tdiff(bs, bn, s, n)
  if ahead < 0 then ahead = 0 end
  local ttl = ahead + time_for(value)
  if value == 0 and ahead == 0 then redis.call('DEL', key); return 0 end
  redis.call('SET', key, string.format('%d ', value) .. tfmt(bs, bn), 'PX', px(ttl, pad))
  return 0
end

-- Fixed window: "window count" (window = index + 1); P = limit, W.
local function fixed_window()
  local W = P[2]
  local q, r = tdivmod(s, n, W)
  local win, count = q + 1, 0
  local v = redis.call('GET', key)
  if v then
    local sw, sc = string.match(v, '^(%d+) (%d+)$')
    sw = tonumber(sw)
    if q + 1 <= sw then win = sw; count = tonumber(sc) end
  end
  if extra > 0 then
    count = count + extra
    charged = extra
  else
    local charged_in = tdivmod(ats, atn, W) + 1
    if charged_in ~= win then return 0 end
    local x = refund
    if x > count then x = count end
    count = count - x
    refunded = x
  end
  local to_end = (win - q - 1) * W + (W - r)
  redis.call('SET', key, string.format('%d %d', win, count), 'PX', px(to_end, pad))
  return 0
end

-- Sliding counter: "window current previous"; P = limit, W.
local function sliding_counter()
  local W = P[2]
  local q, r = tdivmod(s, n, W)
  local idx = q + 1
  local win, cur, prev = idx, 0, 0
  local v = redis.call('GET', key)
  if v then
    local sw, sc, sp = string.match(v, '^(%d+) (%d+) (%d+)$')
    sw = tonumber(sw)
    if idx <= sw then
      win = sw; cur = tonumber(sc); prev = tonumber(sp)
    elseif idx == sw + 1 then
      prev = tonumber(sc)
    end
  end
  if extra > 0 then
    cur = cur + extra
    charged = extra
  else
    local charged_in = tdivmod(ats, atn, W) + 1
    local x = refund
    if charged_in == win then
      if x > cur then x = cur end
      cur = cur - x
    elseif charged_in + 1 == win then
      if x > prev then x = prev end
      prev = prev - x
    else
      return 0
    end
    refunded = x
  end
  local ttl = (win - idx + 2) * W - r
  redis.call('SET', key, string.format('%d %d %d', win, cur, prev), 'PX', px(ttl, pad))
  return 0
end

-- Sliding log: "total t1 c1 t2 c2 ..."; P = limit, W.
local function sliding_log()
  local W = P[2]
  local et, es, en, ec = {}, {}, {}, {}
  local cnt = 0
  local v = redis.call('GET', key)
  if v then
    local first, pending = true, nil
    for tok in string.gmatch(v, '%d+') do
      if first then first = false
      elseif pending == nil then pending = tok
      else
        cnt = cnt + 1
        et[cnt] = pending
        es[cnt], en[cnt] = tparse(pending)
        ec[cnt] = tonumber(tok)
        pending = nil
      end
    end
  end
  local k = 1
  while k <= cnt and tdiff(s, n, es[k], en[k]) >= W do k = k + 1 end
  if extra > 0 then
    charged = extra
    if cnt >= k and tdiff(es[cnt], en[cnt], s, n) >= 0 then
      ec[cnt] = ec[cnt] + extra
    else
      cnt = cnt + 1
      et[cnt], es[cnt], en[cnt], ec[cnt] = tfmt(s, n), s, n, extra
    end
  else
    if tdiff(s, n, ats, atn) >= W then return 0 end
    local at = tfmt(ats, atn)
    local found = nil
    for i = k, cnt do if et[i] == at then found = i; break end end
    if not found then return 0 end
    local x = refund
    if x > ec[found] then x = ec[found] end
    ec[found] = ec[found] - x
    refunded = x
  end
  local total, parts = 0, { '' }
  for i = k, cnt do
    if ec[i] > 0 then
      total = total + ec[i]
      parts[#parts + 1] = et[i] .. ' ' .. string.format('%d', ec[i])
    end
  end
  if total == 0 then redis.call('DEL', key); return 0 end
  parts[1] = string.format('%d', total)
  local ttl = tdiff(es[cnt], en[cnt], s, n) + W
  redis.call('SET', key, table.concat(parts, ' '), 'PX', px(ttl, pad))
  return 0
end

local SETTLE = { gcra, fixed_window, sliding_log, sliding_counter, continuous, continuous }
local status = SETTLE[alg]()
if status ~= 0 then return { status, 0, 0 } end
return flat({ 0, charged, refunded }, check(0))
