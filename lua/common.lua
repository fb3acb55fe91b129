--[[ common.lua: helpers shared by every tollgate function.

No entry point. The Rust side (src/limit/store/redis.rs, lua::Library) builds
one Redis Functions library from the files, in this order:
  `#!lua name=tollgate_<hash of the code>`, then as the body of one
  `local function build()`: common.lua, the seven algorithm files,
  lockout.lua, the entry files (dispatch.lua, release.lua, inspect.lua,
  lockouts.lua: each defines `local function <name>(KEYS, ARGV)`) and a
  `return` of the entry functions; last, one
  `redis.register_function('tollgate_<hash>_<name>', ...)` per entry.
Everything here is a `local` of `build` (Redis forbids globals), visible to
the files after it. While FUNCTION LOAD runs the chunk, Lua's standard
library (`math`, `string`, `table`, ...) does not exist yet, so `build` runs
at the first call after a load, and its locals (the helpers, the algorithm
tables) serve every later call: built once per load, not per call.

Numbers: Lua 5.1 numbers are doubles, exact for integers below 2^53. The Rust
side refuses parameters for which any value could reach that
(src/limit/algorithm/mod.rs), so every value in these scripts is an exact
integer, and math.floor(a / b) and math.ceil(a / b) are exact integer
divisions. Times are microseconds since the Unix epoch. Numbers go to
redis.call as fmt() strings: "%d" (a C long, 64 bits wherever Redis runs) is
exact for them and about twice as fast as Redis's own "%.17g" of a number
argument, or Lua's "%.0f".

Speed: these functions run on every request. The hot paths avoid tables
per call where a plain value does: measured with INFO commandstats
(benches/e2e/lua_cost, benches/RESULTS.md).

Functions:
  fail(msg)             raise the error reply "ERR tollgate: <msg>"
  int(s, what)          the decimal string s as a number (fail if it is not one)
  fmt(x)                the integer x as a decimal string for redis.call: Lua's
                        own conversion ("%.14g") would write 1.7e+15
  now_arg(s)            the clock: tonumber(s) (clock: local), or Redis TIME when
                        s is '' (clock: store). Redis 6.2+ replicates a
                        script's effects, so reading TIME before writing
                        needs no redis.replicate_commands() (Redis < 5 did)
  floor_div(a, b)       floor(a / b), 0 when b is 0
  ceil_div(a, b)        ceil(a / b), 0 when b is 0 (algorithm::ceil_div)
  set_ttl(key, ttl)     PEXPIRE key ceil(ttl / 1000) ms, or DEL key when ttl is 0
  key_type(key)         TYPE key: 'none', 'hash', 'zset', ...
  read(cmd, key, ...)   redis.call(cmd, key, ...), except that a key of
                        another type answers nil instead of raising WRONGTYPE
                        (one call where TYPE and a read would be two)
  hash_load(key, fields) the numeric fields of a hash (0 when missing); the
                        field `foreign` says the key holds something else
                        (a fresh state, replacing it when stored)
  take(args, i, n, what) args[i .. i + n - 1] as integers (fail if args ends
                        before)
  hash_store(key, st, fields, ttl, foreign)  HSET the fields, then set_ttl
  hash_state(fields, algo) algo (an algorithm's table) with the load, store and
                        encode of a state kept as one hash of `fields`
                        (in the Rust state's order), returned
  fluid(unit, drain, burst, slack)  the bucket maths shared by token_bucket
                        and leaky_bucket (algorithm::Fluid): a table
                        {unit, drain, cap, slack} for fl_drain_time(f, l),
                        fl_drained(f, l, el), fl_adopt(f, l, u),
                        fl_units_free(f, l)
  retry_hint(v), reset_hint(v)  Verdict::retry_hint / Verdict::reset_hint
  DEFINE, ALGO          every algorithm file registers DEFINE.<name>, a function
                        returning its table; ALGO.<name> is that table, built
                        on first use
]]

-- Hot library functions as locals: `math.floor` is a global and a field
-- lookup on every use.
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min

local function fail(msg)
  error({err = 'ERR tollgate: ' .. msg}, 0)
end

local function int(s, what)
  local n = tonumber(s)
  if n == nil or n < 0 or n % 1 ~= 0 then
    fail(what .. ': expected a non-negative integer, got ' .. tostring(s))
  end
  return n
end

local function take(args, i, n, what)
  if #args < i + n - 1 then
    fail(what .. ': expected ' .. n .. ' params, the arguments end after '
      .. (#args - i + 1))
  end
  local out = {}
  for j = 1, n do out[j] = int(args[i + j - 1], what) end
  return out
end

local function fmt(x)
  return string.format('%d', x)
end

local function now_arg(s)
  if s == nil or s == '' then
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return int(s, 'now')
end

local function floor_div(a, b)
  if b == 0 then return 0 end
  return floor(a / b)
end

local function ceil_div(a, b)
  if b == 0 then return 0 end
  return ceil(a / b)
end

-- Redis expiries are in milliseconds. Rounding up keeps a state until it is
-- no longer needed (rounding down could forget a counter in the last
-- millisecond of its window); it outlives that by less than a millisecond.
-- (Redis 7.0's PEXPIRE reads the clock twice and may delete at once a key
-- whose few milliseconds elapse in between: it was needed no longer.)
local function set_ttl(key, ttl)
  if ttl <= 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, fmt(ceil(ttl / 1000)))
  end
end

local function key_type(key)
  local t = redis.call('TYPE', key)
  -- TYPE answers a status reply, which Lua sees as {ok = 'hash'}.
  if type(t) == 'table' then t = t.ok end
  return t
end

local function read(cmd, key, ...)
  local r = redis.pcall(cmd, key, ...)
  if type(r) == 'table' and r.err ~= nil then
    if string.find(r.err, 'WRONGTYPE', 1, true) == 1 then return nil end
    error(r, 0)
  end
  return r
end

local function hash_load(key, fields)
  -- Another algorithm's sorted set under this key (nil here): a fresh key,
  -- as in AlgoParams::check ("a state of another algorithm counts as
  -- fresh"). A missing key reads as all nil: zeros.
  local vals = read('HMGET', key, unpack(fields))
  local st = {foreign = vals == nil}
  for i = 1, #fields do
    st[fields[i]] = vals and tonumber(vals[i]) or 0
  end
  return st
end

local function hash_store(key, st, fields, ttl, foreign)
  if ttl <= 0 then
    redis.call('DEL', key)
    return
  end
  if foreign then redis.call('DEL', key) end
  -- Spelled out for the states' sizes (1 to 4 fields): an argument table
  -- and unpack() cost a microsecond per call.
  local a, b, c, d = fields[1], fields[2], fields[3], fields[4]
  local n = #fields
  if n == 1 then
    redis.call('HSET', key, a, fmt(st[a]))
  elseif n == 2 then
    redis.call('HSET', key, a, fmt(st[a]), b, fmt(st[b]))
  elseif n == 3 then
    redis.call('HSET', key, a, fmt(st[a]), b, fmt(st[b]), c, fmt(st[c]))
  elseif n == 4 then
    redis.call('HSET', key, a, fmt(st[a]), b, fmt(st[b]), c, fmt(st[c]), d, fmt(st[d]))
  else
    fail('hash_store: ' .. n .. ' fields')
  end
  set_ttl(key, ttl)
end

local function hash_state(fields, algo)
  function algo.load(key)
    return hash_load(key, fields)
  end
  function algo.store(key, p, s, v)
    hash_store(key, v.state, fields, v.ttl, s.foreign)
  end
  function algo.encode(s)
    local out = {}
    for i = 1, #fields do out[i] = s[fields[i]] end
    return out
  end
  return algo
end

local function fluid(unit, drain, burst, slack)
  return {unit = unit, drain = drain, cap = burst * unit, slack = slack}
end

local function fl_drain_time(f, level)
  return ceil_div(level, f.drain)
end

local function fl_drained(f, level, elapsed)
  -- Compare first, so a long idle key never multiplies a huge elapsed.
  if elapsed >= fl_drain_time(f, level) then return 0 end
  return level - elapsed * f.drain
end

local function fl_adopt(f, level, old_unit)
  local top = f.cap + f.slack
  if old_unit == f.unit then
    -- unchanged tick size
  elseif old_unit == 0 then
    level = 0
  else
    local units = min(ceil_div(level, old_unit), ceil_div(top, f.unit))
    level = units * f.unit
  end
  return min(level, top)
end

local function fl_units_free(f, level)
  return floor_div(max(f.cap - level, 0), max(f.unit, 1))
end

local function retry_hint(v)
  if v.retry_after >= 0 then return v.retry_after end
  return v.window
end

local function reset_hint(v)
  if v.allowed then return v.reset_after end
  return min(retry_hint(v), v.window)
end

-- name -> the function that builds the algorithm's table; each algorithm
-- file registers one.
local DEFINE = {}

-- name -> {nparams, params, load, check, store, encode}: see any algorithm
-- file. Built on first use, once per library load.
local ALGO = setmetatable({}, {__index = function(algos, name)
  local define = DEFINE[name]
  if define == nil then return nil end
  local a = define()
  algos[name] = a
  return a
end})
