-- GCRA (redis-cell's CL.THROTTLE). KEYS[1]: the TAT, expiring at the TAT (+ padding).
-- ARGV: now_s|'redis', now_n, cost, pad_ms, T (emission interval, ns), tau (ns).
-- Reply: one integer, ttl0 = max(TAT - now, 0) in ns before this call: ttl0 when the call
-- is admitted, -1 - ttl0 when denied. The Rust side derives remaining, retry_after,
-- reset_after and the denial kind from it with the core's own GCRA (scripts.rs), so the
-- answer is the core's by construction; the sign is this script's decision, checked
-- against the core's. A cost above capacity is always denied here (cost x T > tau).
-- The hottest script, so it stands alone, flat, with local aliases, few conversions and a
-- one-integer reply (scripts/redis-script-costs.sh measures each piece). Instants are
-- exact (seconds, nanoseconds) pairs, every duration below 2^52 ns, floor divisions
-- corrected by their exact remainder. Redis TIME is read only when ARGV[1] is 'redis'.
-- Stored TAT: struct '>I5I4' (seconds, nanoseconds), 9 bytes whose first byte is below
-- 3 for any time below 2^63 ns. The previous format, decimal nanoseconds (digits only,
-- first byte '0'..'9'), is still read, so keys written before an upgrade keep their
-- state; each is rewritten in the new format at its next admitted call.
local tonumber, call = tonumber, redis.call
local a1 = ARGV[1]
local s, n
if a1 == 'redis' then
  local t = call('TIME')
  s = tonumber(t[1])
  n = tonumber(t[2]) * 1000
else
  s = tonumber(a1)
  n = tonumber(ARGV[2])
end
local cost = tonumber(ARGV[3])
local T = tonumber(ARGV[5])
local tau = tonumber(ARGV[6])
local ttl0 = 0
local v = call('GET', KEYS[1])
if v then
  local ts, tn
  if string.byte(v) < 48 then ts, tn = struct.unpack('>I5I4', v) else
    local len = #v -- the previous, decimal format
    if len <= 9 then ts = 0; tn = tonumber(v) else
      ts = tonumber(string.sub(v, 1, len - 9))
      tn = tonumber(string.sub(v, len - 8))
    end
  end
  local ds = ts - s
  if ds > 4000000 then ttl0 = 4503599627370496
  elseif ds >= -4000000 then
    local d = ds * 1000000000 + (tn - n)
    if d > 0 then ttl0 = d end
  end
end
local ttl = ttl0 + cost * T
if ttl > tau then return -1 - ttl0 end
if cost > 0 then
  local m = n + ttl
  local q = math.floor(m / 1000000000)
  local r = m - q * 1000000000
  if r < 0 then q = q - 1; r = r + 1000000000 elseif r >= 1000000000 then q = q + 1; r = r - 1000000000 end
  -- expiry: ttl rounded up to ms (floor + 1 >= ceil, at most 1 ms late), plus padding
  local ms = math.floor(ttl / 1000000) + 1
  local pad = ARGV[4]
  if pad ~= '0' then ms = ms + tonumber(pad) end
  call('SET', KEYS[1], struct.pack('>I5I4', s + q, r), 'PX', ms)
end
return ttl0
