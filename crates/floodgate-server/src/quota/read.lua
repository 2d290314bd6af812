-- floodgate: every live report of one quota bucket, writing nothing (floodgate-server's
-- quota::book, for the server's push of fresh assignments between a client's reports).
-- KEYS[1]: the bucket's hash, as report.lua writes it. ARGV: ttl (ms).
-- Reply: {'ok', now, client1, demand1, reported1, ...}, live reports only.
local call = redis.call
local ttl = tonumber(ARGV[1])
local t = call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {'ok', string.format('%d', now)}
local all = call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local c, v = all[i], all[i + 1]
  local sp = string.find(v, ' ', 1, true)
  local at = sp and tonumber(string.sub(v, sp + 1)) or 0
  if sp and at + ttl > now then
    out[#out + 1] = c
    out[#out + 1] = string.sub(v, 1, sp - 1)
    out[#out + 1] = string.format('%d', at)
  end
end
return out
