-- floodgate: shared prelude (time). Lua numbers are IEEE doubles: integers are exact
-- below 2^53 only, and nanosecond Unix times (~1.7e18) are not. So an instant is kept in
-- two exact parts, s seconds and n nanoseconds (0 <= n < 1e9), and every duration the
-- scripts compute stays below 2^52 (the Rust side rejects parameters that could exceed
-- 2^50 ns or 2^50 nano-units). Stored instants are decimal nanosecond strings.
local E9 = 1000000000
local BIG = 4503599627370496 -- 2^52: "further apart than any representable duration"

-- ARGV[1] = 'redis' (read Redis TIME) or the caller's seconds; ARGV[2] = nanoseconds.
-- Reading TIME and then writing needs effects replication: the default since Redis 5
-- (Redis 3.2 and 4 would need redis.replicate_commands() here).
local function now_of(a, b)
  if a == 'redis' then
    local t = redis.call('TIME')
    return tonumber(t[1]), tonumber(t[2]) * 1000
  end
  return tonumber(a), tonumber(b)
end

-- floor(a / b) for integers 0 <= a < 2^53, 0 < b < 2^53, exact.
local function fdiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  if r < 0 then q = q - 1 elseif r >= b then q = q + 1 end
  return q
end

-- a decimal nanosecond string -> s, n
local function tparse(str)
  local len = #str
  if len <= 9 then return 0, tonumber(str) end
  return tonumber(string.sub(str, 1, len - 9)), tonumber(string.sub(str, len - 8))
end

local function tfmt(s, n)
  if s == 0 then return string.format('%d', n) end
  return string.format('%d%09d', s, n)
end

-- (a - b) in nanoseconds, exact when |a - b| < ~4e15; otherwise +-BIG.
local function tdiff(as, an, bs, bn)
  local ds = as - bs
  if ds > 4000000 then return BIG elseif ds < -4000000 then return -BIG end
  return ds * E9 + (an - bn)
end

-- the instant (s, n) + d, for 0 <= d < 2^52
local function tadd(s, n, d)
  local m = n + d
  local q = fdiv(m, E9)
  return s + q, m - q * E9
end

-- milliseconds for PEXPIRE/SET PX: ceil(ns / 1e6) + padding
local function px(ns, pad)
  local q = fdiv(ns, 1000000)
  if q * 1000000 < ns then q = q + 1 end
  if q < 1 then q = 1 end
  return q + pad
end
