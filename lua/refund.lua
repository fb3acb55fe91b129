--[[ refund.lua: give back what a Redis Cluster call took for a request that
a call on another slot rejected, so the request consumes nothing (docs/configuration/limits.md
§6). On one Redis a request's limits are one dispatch call and this is never
needed.

Called as `FCALL tollgate_<hash>_refund <number of KEYS> KEYS... ARGV...`
(see common.lua for the library).

KEYS: the state key "<prefix>:{<32 hex>}:s" of each check to give back, all
      of one slot (the checks one dispatch call allowed), each followed by
      its quota key "<prefix>:{<32 hex>}:q" when its spec has the quota flag
      (the key's own values, as dispatch.lua read them).
ARGV: at (µs: the now that dispatch call reported: when the units were
      taken), now (µs; '' = Redis TIME), then for each check its spec (as in
      dispatch.lua) and, for concurrency, its lease id.
Return: the number of checks refunded (a check whose units had already
        lapsed, or whose key is gone, counts but changes nothing).

Each algorithm undoes its own taking (its `refund` or `refund_zset`): a
counter loses the units if their window still counts, a bucket's level
drops by them (never below empty), GCRA's tat moves back (never before
now), a log's entry at `at` shrinks, a concurrency lease is released. String
states keep their TTL (a refund only shortens what they must last). Lockout
state is untouched: a request allowed on this slot struck nothing here.
]]

-- Each check's parsed spec, lease id (nil but for concurrency) and the
-- place of its state key, filled
-- by the first pass, read by the second, cleared as they are read.
local R_SPEC, R_LEASE, R_KEY = {}, {}, {}

local function refund(KEYS, ARGV)
  local nargs = #ARGV
  if nargs < 2 then
    return redis.error_reply('ERR tollgate: refund: ARGV must start with at, now')
  end
  local at = int(ARGV[1], 'refund: at')
  local now = now_arg(ARGV[2])
  -- First every argument is read and checked, then anything is written:
  -- a malformed call gives nothing back (Redis keeps what a failing
  -- script wrote).
  local i, k, n = 3, 1, 0
  while k <= #KEYS do
    if ARGV[i] == nil then
      fail('refund: ' .. #KEYS .. ' keys, but the arguments end at key ' .. k)
    end
    local sp = SPECS[ARGV[i]] or spec(ARGV[i])
    n = n + 1
    R_SPEC[n], R_KEY[n] = sp, k
    i, k = i + 1, k + (sp.quota and 2 or 1)
    if sp.algo.lease then
      if ARGV[i] == nil then fail('refund: the lease of check ' .. n .. ' is missing') end
      R_LEASE[n] = ARGV[i]
      i = i + 1
    end
  end
  if i ~= nargs + 1 or k ~= #KEYS + 1 then
    fail('refund: ' .. #KEYS .. ' keys and ' .. nargs .. ' arguments do not make whole checks')
  end
  for j = 1, n do
    local sp, lease, at_key = R_SPEC[j], R_LEASE[j], R_KEY[j]
    R_SPEC[j], R_LEASE[j], R_KEY[j] = nil, nil, nil
    local key, algo = KEYS[at_key], sp.algo
    local p1, p2, p3, p4 = sp.p1, sp.p2, sp.p3, sp.p4
    if sp.quota then
      p1, p2, p3, p4 = quota_params(sp, read('GET', KEYS[at_key + 1]))
    end
    if algo.lease then
      algo.release(key, lease, now)
    elseif algo.zset then
      algo.refund_zset(key, at, now, sp.cost, p1, p2, p3, p4)
    else
      local new = algo.refund(read('GET', key), at, now, sp.cost, p1, p2, p3, p4)
      if new then redis.call('SET', key, new, 'KEEPTTL') end
    end
  end
  return n
end
