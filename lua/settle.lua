--[[ settle.lua: apply a cost limit's settlement, `actual - estimate` units on
the (limit, client) whose estimate a dispatch call charged, exactly once.
Mirrors MemoryStore::settle (crates/limit/src/store/memory.rs); the rules
are crates/limit/src/settle.rs's and each algorithm's `settle`
(crates/limit/src/algorithm/settle.rs).

Called as `FCALL tollgate_<hash>_settle <number of KEYS> KEYS... ARGV...`
(see common.lua for the library).

KEYS: the state key "<prefix>:{<32 hex>}:s", the settlement's marker
      "<prefix>:{<32 hex>}:c:<16 hex of the settlement id>" (the same hash
      tag, so the same slot), then, if the spec has the quota flag (4), the
      quota key "<prefix>:{<32 hex>}:q" (quota.lua).
ARGV (5): at (µs: the now of the dispatch call that charged the estimate),
      now (µs; '' = Redis TIME), the check's spec (as in dispatch.lua),
      delta (signed units, at most 2^52 either way), settle_within (µs).
Return: {outcome, units}: 1 applied (units: what took effect, signed like
        delta), 2 replayed (the units the first one applied: nothing
        changed now), 3 expired (now >= at + settle_within: nothing
        changed).

  deadline = at + settle_within;  now >= deadline: expired
  st', ttl, applied = algo.settle(GET state, at, now, delta, params)
  SET marker applied NX GET PX (deadline - now): it was there: replayed
  otherwise: SET state st' PX ttl (or DEL when ttl is 0), applied

For example, a fixed_window of 10,000 per hour that charged an estimate of
150 at `at`, whose response used 30:

  FCALL tollgate_<hash>_settle 2 tg:{<32 hex>}:s tg:{<32 hex>}:c:00000000000004d2
        <at> '' 'fixed_window 0 1 10000 3600000000' -120 900000000
  -> {1, -120}       the window's count is 120 lower
  (the same again)
  -> {2, -120}       nothing changed

The marker lives until the deadline, after which no settlement is applied,
so a replay can never find it gone. Argument errors fail the call before
anything is written.
]]

local SETTLED_APPLIED, SETTLED_REPLAYED, SETTLED_EXPIRED = 1, 2, 3

local function settle(KEYS, ARGV)
  if #ARGV ~= 5 then
    return redis.error_reply('ERR tollgate: settle: expected 5 ARGV (at, now, spec, delta, '
      .. 'settle_within), got ' .. #ARGV)
  end
  local at = int(ARGV[1], 'settle: at')
  local now = now_arg(ARGV[2])
  local sp = SPECS[ARGV[3]] or spec(ARGV[3])
  local delta = tonumber(ARGV[4])
  if delta == nil or delta % 1 ~= 0 or delta < -SETTLE_MAX or delta > SETTLE_MAX then
    fail('settle: delta: expected an integer within 2^52 either way, got ' .. tostring(ARGV[4]))
  end
  local within = int(ARGV[5], 'settle: settle_within')
  local algo = sp.algo
  if algo.settle == nil then fail('settle: ' .. sp.name .. ' takes no settlements') end
  local want = sp.quota and 3 or 2
  if #KEYS ~= want then
    fail('settle: expected ' .. want .. ' KEYS (the state key, the marker'
      .. (sp.quota and ', the quota key' or '') .. '), got ' .. #KEYS)
  end

  local deadline = at + within
  if now >= deadline then return {SETTLED_EXPIRED, 0} end
  local p1, p2, p3, p4 = sp.p1, sp.p2, sp.p3, sp.p4
  if sp.quota then p1, p2, p3, p4 = quota_params(sp, read('GET', KEYS[3])) end
  local new, ttl, applied = algo.settle(read('GET', KEYS[1]), at, now, delta, p1, p2, p3, p4)
  local first = redis.call('SET', KEYS[2], fmt(applied), 'NX', 'GET', 'PX',
    ttl_ms(deadline - now))
  if first then return {SETTLED_REPLAYED, tonumber(first)} end
  put(KEYS[1], new, ttl)
  return {SETTLED_APPLIED, applied}
end
