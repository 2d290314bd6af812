-- GCRA (redis-cell's CL.THROTTLE). KEYS[1]: the TAT, expiring at the TAT (+ padding).
-- ARGV (decimal): now_s|'redis', now_n, cost, pad_ms, T (emission interval, ns), tau (ns).
-- Reply: one integer, ttl0 = max(TAT - now, 0) in ns before this call: ttl0 when the call
-- is admitted, -1 - ttl0 when denied. The Rust side derives remaining, retry_after,
-- reset_after and the denial kind from it with the core's own GCRA (scripts.rs), so the
-- answer is the core's by construction; the sign is this script's decision, checked
-- against the core's. A cost above capacity is always denied here (cost x T > tau).
-- The hottest script, so it stands alone, flat, with few conversions and a one-integer
-- reply (scripts/redis-script-costs.sh measures each piece): numbers are read by
-- arithmetic coercion (one strtod; Lua 5.1's tonumber runs two), the stored TAT is
-- binary (no parsing or formatting), and the write needs no division.
-- Exactness: instants are (seconds, nanoseconds) pairs; tau is below 2^53 - 2^30 ns
-- (about 104 days, scripts.rs checks it), so every duration an admission computes (ttl0,
-- ttl, n + ttl) is an exact integer below 2^53; a sum above tau may round, but only to
-- another value above tau, so the decision is exact. ds x 10^9 is exact for |ds| below
-- 1.8 x 10^7 (an even integer below 2^54), and so is the lead d whenever |d| < 2^53.
-- Stored TAT: struct '>I5I7' = (seconds of the writer's now, its nanoseconds + ttl), so
-- TAT = s x 10^9 + n with n below 2^53; 12 bytes whose first byte is below 3 for any time
-- below 2^63 ns. The previous format, decimal nanoseconds (digits only, first byte
-- '0'..'9'), is still read, so keys written before an upgrade keep their state; each is
-- rewritten in the new format at its next admitted call. (A client still running the
-- previous script fails on a new-format value: an error, answered by its fault policy,
-- never a misread.)
local call = redis.call
local a1 = ARGV[1]
local s, n
if a1 == 'redis' then
  local t = call('TIME')
  s = t[1] + 0
  n = t[2] * 1000
else
  s = a1 + 0
  n = ARGV[2] + 0
end
local cost = ARGV[3] + 0
local T = ARGV[5] + 0
local tau = ARGV[6] + 0
local ttl0 = 0
local v = call('GET', KEYS[1])
if v then
  local ts, tn
  if string.byte(v) < 48 then ts, tn = struct.unpack('>I5I7', v) else
    local len = #v -- the previous, decimal format
    if len <= 9 then ts = 0; tn = v + 0 else
      ts = string.sub(v, 1, len - 9) + 0
      tn = string.sub(v, len - 8) + 0
    end
  end
  local ds = ts - s
  -- written more than 9 x 10^6 s (104 days) after now: a TAT beyond any tau
  if ds > 9000000 then ttl0 = 9007199254740992
  -- written more than 9.1 x 10^6 s before now: the TAT (below 2^53 ns after its write)
  -- is past
  elseif ds >= -9100000 then
    local d = ds * 1000000000 + (tn - n)
    if d > 0 then ttl0 = d end
  end
end
local ttl = ttl0 + cost * T
if ttl > tau then return -1 - ttl0 end
if cost > 0 then
  -- expiry: floor(ttl / 1 ms) + 1 >= ceil (exact: ttl < 2^53), at most 1 ms late
  local ms = (ttl - ttl % 1000000) / 1000000 + 1
  local pad = ARGV[4]
  if pad ~= '0' then ms = ms + pad end
  call('SET', KEYS[1], struct.pack('>I5I7', s, n + ttl), 'PX', ms)
end
return ttl0
