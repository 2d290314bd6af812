-- floodgate: one client's report for one quota bucket, and every live report of the
-- bucket back, in one round trip (floodgate-server's quota::book).
-- KEYS[1]: a hash, client -> "DEMAND REPORTED" (DEMAND: milli-requests per second,
--   REPORTED: Redis TIME in ms), expiring (PEXPIRE) a time to live after its last report.
-- ARGV: client, demand (milli-requests per second), ttl (ms), max clients.
-- Reports older than the ttl are removed. A client not yet in the hash when it holds
-- max clients live is refused: reply {'full', now}; else the report is written and the
-- reply is {'ok', now, client1, demand1, reported1, ...}, this client last.
local call = redis.call
local key = KEYS[1]
local me = ARGV[1]
local demand = ARGV[2]
local ttl = tonumber(ARGV[3])
local max = tonumber(ARGV[4])
local t = call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {'ok', string.format('%d', now)}
local all = call('HGETALL', key)
local others = 0
for i = 1, #all, 2 do
  local c, v = all[i], all[i + 1]
  local sp = string.find(v, ' ', 1, true)
  local at = sp and tonumber(string.sub(v, sp + 1)) or 0
  if at + ttl <= now then
    call('HDEL', key, c)
  elseif c ~= me then
    others = others + 1
    out[#out + 1] = c
    out[#out + 1] = string.sub(v, 1, sp - 1)
    out[#out + 1] = string.format('%d', at)
  end
end
if others >= max then
  return {'full', string.format('%d', now)}
end
call('HSET', key, me, demand .. ' ' .. string.format('%d', now))
call('PEXPIRE', key, ttl)
out[#out + 1] = me
out[#out + 1] = demand
out[#out + 1] = string.format('%d', now)
return out
