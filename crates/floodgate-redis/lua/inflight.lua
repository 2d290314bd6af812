-- In-flight leases (floodgate_core::inflight). KEYS[1]: a sorted set of lease ids scored
-- by expiry in microseconds since the Unix epoch (exact doubles: below 2^53 until the year
-- 2255), expiring (PEXPIRE) with its latest lease.
-- ARGV: op ('acquire' | 'renew' | 'release'), now ('redis' for Redis TIME, else the
-- caller's microseconds), lease id (decimal), limit N, ttl (us), pad (ms).
-- A lease is live while its expiry is after now.
-- acquire: drops the expired leases; admitted when fewer than N remain: adds the lease
--   (ZADD NX; an id already present answers {-1} and nothing changes).
--   Reply {admitted 1/0, live leases after, earliest expiry - now, latest expiry - now
--   (us, 0 when none), now (us)}.
-- renew: a live lease gets expiry now + ttl. Reply {1 renewed / 0 unknown or expired}.
-- release: removes the lease. Reply {1 when it was live / 0 otherwise}: at most one
--   place is ever freed per lease.
local call = redis.call
local key = KEYS[1]
local op = ARGV[1]
local now
if ARGV[2] == 'redis' then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
else
  now = tonumber(ARGV[2])
end
local id = ARGV[3]

-- the latest expiry held, or nil
local function latest()
  local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then return tonumber(last[2]) end
  return nil
end

local function expire_at_latest()
  local l = latest()
  if l and l > now then
    local ms = math.floor((l - now) / 1000)
    if ms * 1000 < l - now then ms = ms + 1 end
    call('PEXPIRE', key, ms + tonumber(ARGV[6]))
  elseif l then
    call('DEL', key)
  end
end

if op == 'acquire' then
  call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now))
  local n = call('ZCARD', key)
  local limit = tonumber(ARGV[4])
  if n < limit then
    local exp = now + tonumber(ARGV[5])
    if call('ZADD', key, 'NX', string.format('%d', exp), id) == 0 then return {-1} end
    n = n + 1
    expire_at_latest()
    return {1, n, 0, latest() - now, now}
  end
  local first = call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return {0, n, tonumber(first[2]) - now, latest() - now, now}
elseif op == 'renew' then
  local s = call('ZSCORE', key, id)
  if not s or tonumber(s) <= now then return {0} end
  call('ZADD', key, 'XX', string.format('%d', now + tonumber(ARGV[5])), id)
  expire_at_latest()
  return {1}
elseif op == 'release' then
  local s = call('ZSCORE', key, id)
  if not s then return {0} end
  call('ZREM', key, id)
  if tonumber(s) > now then return {1} end
  return {0}
end
return redis.error_reply('inflight.lua: unknown op ' .. tostring(op))
