-- All-or-nothing over several policies in one atomic call (single-node Redis: the keys of
-- different user keys lie in different cluster slots). Appended to the prelude and to
-- ALG, the per-algorithm scripts each wrapped as function(KEYS, ARGV) (scripts.rs).
-- KEYS[i]: check i's key. ARGV: mode ('all' or 'dry'), now_s|'redis', now_n, then per
-- check: the algorithm's index in ALG, m, and m arguments (the single script's
-- ARGV[3..]: cost, pad_ms, params).
-- 'all': every check is decided, and charged when admitted, in order, all at one
-- instant. If any denies, every key is put back as it was (value and expiry), and each
-- check that admitted is decided again at cost 0: a view of its state that writes
-- nothing (the in-process all-or-nothing's answer).
-- 'dry': the same decisions, and every key put back whatever they are: what a charge
-- would answer, charging nothing (a Redis Cluster's first step, one key per call).
-- Reply: 1 or 0 (all admitted), then per check the length of its script's reply and the
-- reply (GCRA: one integer; the others: seven).
local dry = ARGV[1] == 'dry'
local s, n
if ARGV[2] == 'redis' then
  local t = redis.call('TIME')
  s = t[1] + 0
  n = t[2] * 1000
else
  s = ARGV[2] + 0
  n = ARGV[3] + 0
end
local function admits(r)
  if type(r) == 'number' then return r >= 0 end
  return r[1] == 1
end
local algs, args = {}, {}
local p = 4
for i = 1, #KEYS do
  local m = ARGV[p + 1] + 0
  local a = { s, n }
  for j = 1, m do a[2 + j] = ARGV[p + 1 + j] end
  algs[i] = ALG[ARGV[p] + 0]
  args[i] = a
  p = p + 2 + m
end
local saved, replies, all = {}, {}, true
for i = 1, #KEYS do
  local k = KEYS[i]
  saved[i] = { redis.call('GET', k), redis.call('PTTL', k) }
  replies[i] = algs[i]({ k }, args[i])
  if not admits(replies[i]) then all = false end
end
if dry or not all then
  -- back to the state before the call, in reverse order (a key listed twice is put back
  -- to its first state last)
  for i = #KEYS, 1, -1 do
    local k, v, ttl = KEYS[i], saved[i][1], saved[i][2]
    if not v then redis.call('DEL', k)
    elseif ttl > 0 then redis.call('SET', k, v, 'PX', ttl)
    else redis.call('SET', k, v) end
  end
end
if not dry and not all then
  for i = 1, #KEYS do
    if admits(replies[i]) then
      args[i][3] = 0
      replies[i] = algs[i]({ KEYS[i] }, args[i])
    end
  end
end
local out = { all and 1 or 0 }
for i = 1, #KEYS do
  local r = replies[i]
  if type(r) == 'number' then
    out[#out + 1] = 1
    out[#out + 1] = r
  else
    out[#out + 1] = #r
    for j = 1, #r do out[#out + 1] = r[j] end
  end
end
return out
