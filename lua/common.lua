--[[ common.lua: helpers shared by every tollgate function.

No entry point. The Rust side (crates/limit/src/store/redis/lua.rs, Library) builds
one Redis Functions library from the files, in this order:
  `#!lua name=tollgate_<hash of the code>`, then as the body of one
  `local function build()`: common.lua, the seven algorithm files,
  lockout.lua, quota.lua (a key's own values), the entry files (dispatch.lua, release.lua, inspect.lua,
  lockouts.lua, refund.lua, probe.lua, settle.lua: each defines `local function
  <name>(KEYS, ARGV)`) and a `return` of the entry functions; last, one
  `redis.register_function('tollgate_<hash>_<name>', ...)` per entry (the
  read-only probe with the `no-writes` flag).
Everything here is a `local` of `build` (Redis forbids globals), visible to
the files after it. While FUNCTION LOAD runs the chunk, Lua's standard
library (`math`, `string`, `table`, ...) does not exist yet, so `build` runs
at the first call after a load, and its locals (the helpers, the algorithm
tables) serve every later call: built once per load, not per call.

Numbers: Lua 5.1 numbers are doubles, exact for integers below 2^53. The Rust
side refuses parameters for which any value could reach that
(crates/limit/src/algorithm/mod.rs), so every value in these scripts is an exact
integer, and math.floor(a / b) and math.ceil(a / b) are exact integer
divisions. Times are microseconds since the Unix epoch. Numbers go to
redis.call as strings made by "%d" (a C long, 64 bits wherever Redis runs),
exact for them and about twice as fast as Redis's own "%.17g" of a number
argument, or Lua's "%.0f".

States: the five O(1) algorithms and the lockouts keep their state in one
string per key, written with one SET ... PX: little-endian doubles (exact
for the integers here), a tag naming whose state it is (fixed_window 1,
sliding_window 2, token_bucket 3, gcra 4, leaky_bucket 5, a lockout 9), then
the fields (each file's "State:"). Binary, because Lua 5.1 turns numbers
into text and back with snprintf and strtod, a microsecond or so per
number: struct.pack and struct.unpack copy bytes. A string of another
length or tag, or a key of another type (a sliding log's sorted set, or the
hashes earlier versions of these scripts wrote), reads as a fresh state and
is replaced when stored: "a state of another algorithm counts as fresh"
(AlgoParams::check). sliding_log and concurrency keep sorted sets.

Speed: dispatch runs on every request, so its path parses each distinct
check spec once per load (a cache), builds no table per check (multiple
return values and the scratch arrays of dispatch.lua instead), reads every
string state with one MGET and writes each with one SET. A function call,
C's or Lua's, costs Redis's Lua ~300 instructions where an operator costs
~15, so the algorithms' check functions (run for every check) make few:
max and min are comparisons, floor and ceil arithmetic (below), and the
three common algorithms (token bucket, fixed and sliding window) decode
and encode their state strings themselves rather than through
state_unpack and state_pack. Measured with callgrind and INFO
commandstats (benches/e2e/lua_cost).

Functions:
  fail(msg)             raise the error reply "ERR tollgate: <msg>"
  int(s, what)          the decimal string s as a number (fail if it is not a
                        non-negative integer)
  ints(args, i, n, what) args[i .. i + n - 1] as integers, n <= 6, returned as
                        n values (fail if args ends before)
  fmt(x)                the integer x as a decimal string for redis.call: Lua's
                        own conversion ("%.14g") would write 1.7e+15
  now_arg(s)            the clock: tonumber(s) (clock: local), or Redis TIME when
                        s is '' (clock: store). Redis 6.2+ replicates a
                        script's effects, so reading TIME before writing
                        needs no redis.replicate_commands() (Redis < 5 did)
  floor_div(a, b)       floor(a / b), 0 when b is 0
  ceil_div(a, b)        ceil(a / b), 0 when b is 0 (algorithm::ceil_div)
  ttl_ms(ttl)           ceil(ttl / 1000) as a decimal string: Redis expiries
                        are in milliseconds
  set_ttl(key, ttl)     PEXPIRE key ttl_ms(ttl), or DEL key when ttl is 0
  put(key, st, ttl)     SET key st PX ttl_ms(ttl), or DEL key when ttl is 0
  state_unpack(st, tag, n) the n fields of the state string st, or nil if st
                        is none, or another's (see "States")
  state_pack(tag, n, a, b, c, d) the state string of tag and n fields
  state_decode(st, tag, n) the n fields of st as an array (inspect.lua), or
                        nil as state_unpack
  key_type(key)         TYPE key: 'none', 'hash', 'zset', ...
  read(cmd, key, ...)   redis.call(cmd, key, ...), except that a key of
                        another type answers nil instead of raising WRONGTYPE
                        (one call where TYPE and a read would be two)
  fl_drain_time(level, drain), fl_drained(level, elapsed, drain),
  fl_adopt(level, old_unit, unit, top), fl_units_free(level, cap, unit),
  fl_next_unit(level, cap, unit, drain)
                        the bucket maths shared by token_bucket and
                        leaky_bucket (algorithm::Fluid)
  retry_hint(retry, window), reset_hint(retry, window)
                        Verdict::retry_hint / Verdict::reset_hint of a
                        rejection (an allowed verdict's reset is its own)
  SETTLE_MAX            2^52: the furthest a settlement moves a state, and a
                        fixed window's highest count (settle::MAX_LEVEL)
  settle_shift(level, delta, unit, lo, hi)
                        level moved by delta steps of unit within [lo, hi],
                        and the steps applied (settle::shift in
                        crates/limit/src/algorithm/settle.rs)
  fl_settle(st, tag, at, now, delta, unit, drain, top)
                        a bucket's settlement (token_bucket, leaky_bucket: the
                        state of tag with fields level, ts, unit): the level
                        drained to max(now, at), moved by delta units within
                        [0, top]; the state to store (nil: none), its ttl and
                        the units applied
  DEFINE, ALGO          every algorithm file registers DEFINE.<name>, a function
                        returning its table; ALGO.<name> is that table, built
                        on first use
]]

-- Hot library functions as locals: `math.floor` is a global and a field
-- lookup on every use.
local floor, ceil, max, min = math.floor, math.ceil, math.max, math.min
local format, match = string.format, string.match
local spack, sunpack = struct.pack, struct.unpack

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

local function ints(args, i, n, what)
  if #args < i + n - 1 then
    fail(what .. ': expected ' .. n .. ' params, the arguments end after '
      .. (#args - i + 1))
  end
  -- Spelled out: a table and unpack() would be one more allocation per check.
  if n == 2 then return int(args[i], what), int(args[i + 1], what) end
  if n == 3 then
    return int(args[i], what), int(args[i + 1], what), int(args[i + 2], what)
  end
  if n == 4 then
    return int(args[i], what), int(args[i + 1], what), int(args[i + 2], what),
      int(args[i + 3], what)
  end
  if n == 6 then
    return int(args[i], what), int(args[i + 1], what), int(args[i + 2], what),
      int(args[i + 3], what), int(args[i + 4], what), int(args[i + 5], what)
  end
  fail('ints: ' .. n .. ' values')
end

local function fmt(x)
  return format('%d', x)
end

local function now_arg(s)
  if s == nil or s == '' then
    -- TIME's two decimal strings: Lua's arithmetic converts them as
    -- tonumber would, without calling it.
    local t = redis.call('TIME')
    return t[1] * 1000000 + t[2]
  end
  return int(s, 'now')
end

-- In Lua arithmetic, not math.floor / math.ceil (see "Speed"). Lua's % is
-- floored (x % 1 = x - floor(x), exact), so x - x % 1 = floor(x) and
-- x + (-x) % 1 = ceil(x); the algorithms' check functions spell these out.
local function floor_div(a, b)
  if b == 0 then return 0 end
  local q = a / b
  return q - q % 1
end

local function ceil_div(a, b)
  if b == 0 then return 0 end
  local q = a / b
  return q + (-q) % 1
end

-- Redis expiries are in milliseconds. Rounding up keeps a state until it is
-- no longer needed (rounding down could forget a counter in the last
-- millisecond of its window); it outlives that by less than a millisecond.
-- (Redis 7.0's PEXPIRE reads the clock twice and may delete at once a key
-- whose few milliseconds elapse in between: it was needed no longer.)
local function ttl_ms(ttl)
  local ms = ttl / 1000
  return format('%d', ms + (-ms) % 1)
end

local function set_ttl(key, ttl)
  if ttl <= 0 then
    redis.call('DEL', key)
  else
    redis.call('PEXPIRE', key, ttl_ms(ttl))
  end
end

-- ms -> its text, for put: the states of a batch's clients of one limit
-- mostly share their TTLs (one now, one window end), and a table read
-- costs ~75 instructions where string.format costs ~1,800. At most
-- 256 texts, then it starts over.
local PX_TEXT, PX_COUNT = {}, 0

local function put(key, st, ttl)
  if ttl <= 0 or not st then
    redis.call('DEL', key)
  else
    -- ttl_ms(ttl), spelled out (one call fewer for every state written),
    -- its text from PX_TEXT when it was made before
    local ms = ttl / 1000
    ms = ms + (-ms) % 1
    local px = PX_TEXT[ms]
    if px == nil then
      if PX_COUNT >= 256 then PX_TEXT, PX_COUNT = {}, 0 end
      px = format('%d', ms)
      PX_TEXT[ms], PX_COUNT = px, PX_COUNT + 1
    end
    redis.call('SET', key, st, 'PX', px)
  end
end

-- struct formats of a state of n fields: the tag, then the fields.
local STATE_FORMAT = {'<dd', '<ddd', '<dddd', '<ddddd'}

local function state_unpack(st, tag, n)
  if st and #st == 8 * (n + 1) then
    local t, a, b, c, d = sunpack(STATE_FORMAT[n], st)
    if t == tag then return a, b, c, d end
  end
  return nil
end

local function state_pack(tag, n, a, b, c, d)
  return spack(STATE_FORMAT[n], tag, a, b, c, d)
end

local function state_decode(st, tag, n)
  -- state_unpack's values past the n-th are struct.unpack's position.
  local a, b, c, d = state_unpack(st, tag, n)
  if a == nil then return nil end
  if n == 1 then return {a} end
  if n == 2 then return {a, b} end
  if n == 3 then return {a, b, c} end
  return {a, b, c, d}
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

-- The time to drain level: ceil(level / drain).
local fl_drain_time = ceil_div

local function fl_drained(level, elapsed, drain)
  -- Compare first, so a long idle key never multiplies a huge elapsed.
  if elapsed >= ceil_div(level, drain) then return 0 end
  return level - elapsed * drain
end

-- A level counted in ticks of old_unit, in ticks of unit, at most top
-- (the cap plus any slack).
local function fl_adopt(level, old_unit, unit, top)
  if old_unit == unit then
    -- unchanged tick size
  elseif old_unit == 0 then
    level = 0
  else
    local units, most = ceil_div(level, old_unit), ceil_div(top, unit)
    level = (units < most and units or most) * unit
  end
  if level > top then return top end
  return level
end

local function fl_units_free(level, cap, unit)
  if level >= cap then return 0 end
  local q = (cap - level) / (unit > 1 and unit or 1)
  return q - q % 1
end

-- The time until fl_units_free(level) grows by one (Fluid::next_unit); a
-- full bucket gets one unit's time.
local function fl_next_unit(level, cap, unit, drain)
  if unit < 1 then unit = 1 end
  local ticks
  if level >= cap then
    ticks = level - cap + unit
  else
    ticks = unit - (cap - level) % unit
  end
  return ceil_div(ticks, drain)
end

local function retry_hint(retry, window)
  if retry >= 0 then return retry end
  return window
end

local function reset_hint(retry, window)
  return min(retry_hint(retry, window), window)
end

local SETTLE_MAX = 4503599627370496

local function settle_shift(level, delta, unit, lo, hi)
  if delta >= 0 then
    local k = min(delta, ceil_div(max(hi - level, 0), unit))
    if k == 0 then return level, 0 end
    return min(level + k * unit, hi), k
  end
  local room = max(level - lo, 0)
  local k = min(-delta, ceil_div(room, unit))
  return level - min(k * unit, room), -k
end

local function fl_settle(st, tag, at, now, delta, unit, drain, top)
  now = max(now, at)
  local slv, ts, su = state_unpack(st, tag, 3)
  if slv == nil then slv, ts, su = 0, 0, 0 end
  local level = fl_drained(fl_adopt(slv, su, unit, top), max(now - ts, 0), drain)
  local applied
  level, applied = settle_shift(level, delta, unit, 0, top)
  local ttl = fl_drain_time(level, drain)
  return ttl > 0 and state_pack(tag, 3, level, max(ts, now), unit) or nil, ttl, applied
end

-- name -> the function that builds the algorithm's table; each algorithm
-- file registers one.
local DEFINE = {}

-- name -> the algorithm's table (see fixed_window.lua). Built on first use,
-- once per library load.
local ALGO = setmetatable({}, {__index = function(algos, name)
  local define = DEFINE[name]
  if define == nil then return nil end
  local a = define()
  algos[name] = a
  return a
end})
