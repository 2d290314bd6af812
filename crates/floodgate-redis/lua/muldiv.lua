-- floodgate: shared prelude (exact a x b / c). Products of two 50-bit values do not fit
-- a double, so they are formed exactly in six base-2^24 limbs; the quotient is estimated
-- in floating point (off by at most one or two) and corrected with the exact remainder.
local L24 = 16777216
local Q_LIMIT = 2251799813685248 -- 2^51

local function split3(x)
  local a0 = x % L24
  x = (x - a0) / L24
  local a1 = x % L24
  return a0, a1, (x - a1) / L24
end

local function mul6(x, y)
  local a0, a1, a2 = split3(x)
  local b0, b1, b2 = split3(y)
  local c = { a0 * b0, a0 * b1 + a1 * b0, a0 * b2 + a1 * b1 + a2 * b0, a1 * b2 + a2 * b1, a2 * b2, 0 }
  local carry = 0
  for i = 1, 6 do
    local v = c[i] + carry
    local lo = v % L24
    c[i] = lo
    carry = (v - lo) / L24
  end
  return c
end

-- floor(x * y / z) and the remainder, for integers x, y < 2^53, 0 < z < 2^50.
-- Returns nil when the quotient is 2^51 or more (callers saturate).
local function muldivmod(x, y, z)
  if x == 0 or y == 0 then return 0, 0 end
  local q = math.floor((x * y) / z)
  if q >= Q_LIMIT then return nil end
  if x * y < 9007199254740992 then
    local r = x * y - q * z
    if r >= 0 and r < z then return q, r end
  end
  local p = mul6(x, y)
  local m = mul6(q, z)
  local r = 0
  for i = 6, 1, -1 do r = r * L24 + (p[i] - m[i]) end
  while r < 0 do q = q - 1; r = r + z end
  while r >= z do q = q + 1; r = r - z end
  return q, r
end

-- floor(now / W) and now mod W for the instant (s, n), 0 < W < 2^50
local function tdivmod(s, n, w)
  local q1, r1 = muldivmod(s, E9, w)
  local m = r1 + n
  local q2 = fdiv(m, w)
  return q1 + q2, m - q2 * w
end
