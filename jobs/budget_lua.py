"""The retry budget's reservation on Redis: one Lua script, atomic across workers.

jobs.budget runs it (`reserve`); jobs.budget_pg is the same rule as one
PostgreSQL statement. The rule and the window layout are in jobs.budget's
docstring.
"""

# KEYS: none (the keys are built from ARGV[1], a prefix with the kind in a hash
# tag, so one kind's windows live on one cluster slot).
# ARGV: prefix, due, window, ratio, floor, last (latest acceptable slot),
#       guard, spread (0..1), ttl (seconds), now, and up to two windows whose
#       count of retries is released first ("" for none; see `admit`).
# Returns {granted 0/1, slot - due (string seconds), first_exhaustion 0/1 (2: not the
# first), used, limit}
# where used/limit are those of the window of `due` before this retry.
RESERVE_SCRIPT = """
local prefix = ARGV[1]
local due = tonumber(ARGV[2])
local w = tonumber(ARGV[3])
local ratio = tonumber(ARGV[4])
local floor_ = tonumber(ARGV[5])
local last = tonumber(ARGV[6])
local guard = tonumber(ARGV[7])
local spread = tonumber(ARGV[8])
local ttl = tonumber(ARGV[9])
local now = tonumber(ARGV[10])
local function counts(k)
  local v = redis.call('HMGET', prefix .. k, 'f', 'r')
  return tonumber(v[1] or 0), tonumber(v[2] or 0)
end
local function room(k)
  local f, r = counts(k)
  return r + 1 <= ratio * f + floor_
end
local function take(k)
  redis.call('HINCRBY', prefix .. k, 'r', 1)
  redis.call('EXPIRE', prefix .. k, ttl)
end
local function release(k)
  if k and tonumber(redis.call('HGET', prefix .. k, 'r') or 0) > 0 then
    redis.call('HINCRBY', prefix .. k, 'r', -1)
  end
end
release(tonumber(ARGV[11]))
release(tonumber(ARGV[12]))
local k0 = math.floor(due / w)
local f0, r0 = counts(k0)
local t = due
local exhausted = 0
while t <= last do
  local k = math.floor(t / w)
  local edge = (k + 1) * w - t < guard
  if room(k) and ((not edge) or room(k + 1)) then
    take(k)
    if edge then take(k + 1) end
    return {1, string.format('%.17g', t - due), exhausted, r0, tostring(ratio * f0 + floor_)}
  end
  if exhausted == 0 then
    local mark = prefix .. math.floor(now / w)
    if redis.call('HSETNX', mark, 'x', 1) == 1 then
      exhausted = 1
      redis.call('EXPIRE', mark, ttl)
    else
      exhausted = 2
    end
  end
  local start = (k + 1) * w
  t = start + spread * (w - guard)
  if t > last and start <= last then t = last end
end
return {0, '0', exhausted, r0, tostring(ratio * f0 + floor_)}
"""
