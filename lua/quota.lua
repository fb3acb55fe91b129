--[[ quota.lua: a key's own values (crates/limit/src/quota.rs), turned into
an algorithm's params as AlgoParams::with_quota does. A check whose spec
has the quota flag (dispatch.lua) reads its key's "<prefix>:{<32 hex>}:q"
in the same call as its state, and decides under quota_params(sp, text).

The text: space-separated words l=<limit>, r=<count>/<period µs>,
b=<burst>, each at most once (`r=100/1000000 b=200`). The stored values
are the operator's, never derived params, so a reload that changes the
limit's other params (a window, max_delay) keeps them. Where the text is
none, unreadable, names a value the algorithm does not have, or no longer
fits (the Rust constructors' bounds: counts 1 .. 10^12, periods 1 µs ..
1000 days, a bucket exact below 2^53, GCRA's interval at least 1 µs and
its window at most 1000 days), the spec's own params apply: the default.
]]

local Q_MAX_COUNT = 1000000000000
local Q_MAX_DURATION = 1000 * 86400 * 1000000
local Q_MAX_EXACT = 9007199254740991

-- text -> parsed values ({l, c, p, b}) or false; Q_COUNT entries.
local QPARSED, Q_COUNT = {}, 0

local function q_count(v)
  local n = tonumber(match(v, '^%d+$') or '')
  if n == nil or n < 1 or n > Q_MAX_COUNT then return nil end
  return n
end

local function quota_parse(text)
  local q = QPARSED[text]
  if q ~= nil then return q end
  q = {}
  for word in string.gmatch(text, '[^ ]+') do
    local name, value = match(word, '^(%a)=(.+)$')
    if name == 'l' and q.l == nil then
      q.l = q_count(value)
      if q.l == nil then q = false break end
    elseif name == 'b' and q.b == nil then
      q.b = q_count(value)
      if q.b == nil then q = false break end
    elseif name == 'r' and q.c == nil then
      local c, p = match(value, '^(%d+)/(%d+)$')
      q.c, q.p = q_count(c or ''), tonumber(p or '')
      if q.c == nil or q.p == nil or q.p < 1 or q.p > Q_MAX_DURATION then q = false break end
    else
      q = false
      break
    end
  end
  if q and q.l == nil and q.b == nil and q.c == nil then q = false end
  if Q_COUNT >= 1024 then QPARSED, Q_COUNT = {}, 0 end
  QPARSED[text], Q_COUNT = q, Q_COUNT + 1
  return q
end

local function q_gcd(a, b)
  while b ~= 0 do a, b = b, a % b end
  return a
end

-- Algorithms whose first param is the limit a quota's l replaces.
local Q_LIMIT_FIRST = {fixed_window = true, calendar_window = true, sliding_window = true,
  sliding_log = true, concurrency = true}

-- The params check sp decides under when its key's quota text is `text`
-- (false or nil: none).
local function quota_params(sp, text)
  local p1, p2, p3, p4 = sp.p1, sp.p2, sp.p3, sp.p4
  if type(text) ~= 'string' then return p1, p2, p3, p4 end
  local q = quota_parse(text)
  if not q then return p1, p2, p3, p4 end
  local name = sp.name
  if Q_LIMIT_FIRST[name] then
    if q.c ~= nil or q.b ~= nil then return p1, p2, p3, p4 end
    return q.l, p2, p3, p4
  end
  if q.l ~= nil then return p1, p2, p3, p4 end
  if name == 'gcra' then
    -- (interval, burst, max_delay)
    local interval, burst = p1, q.b or p2
    if q.c ~= nil then interval = math.floor(q.p / q.c) end
    if interval < 1 or interval * burst > Q_MAX_DURATION then return p1, p2, p3, p4 end
    return interval, burst, p3, p4
  end
  -- token_bucket, leaky_bucket: (unit, drain, burst, max_delay)
  local unit, drain, burst = p1, p2, q.b or p3
  if q.c ~= nil then
    local g = q_gcd(q.c, q.p)
    unit, drain = q.p / g, q.c / g
  end
  if 2 * burst * unit + p4 * drain > Q_MAX_EXACT then return p1, p2, p3, p4 end
  return unit, drain, burst, p4
end
