--[[ probe.lua: the decision one request would get now, all or nothing, as
dispatch.lua would answer it, with nothing written (docs/operations.md,
POST /probe). Mirrors MemoryStore::probe (crates/limit/src/store/memory.rs):
decide::decide's outcomes, its writes dropped.

Called as `FCALL tollgate_<hash>_probe <number of KEYS> KEYS... ARGV...`
(see common.lua for the library). Registered with the `no-writes` flag:
Redis itself refuses any write this function (or a helper it calls) would
make, so it can neither create a key, nor refresh a TTL, nor count a
strike.

KEYS: as dispatch.lua's for one request, without the lockout index: each
      check's state key, then its lockout key if it has a lockout.
ARGV: as dispatch.lua's for one request: now (µs; '' = Redis TIME), 1, n,
      then each check's spec (and lease id for concurrency; a probe's
      lease id holds no slot, so it takes none).
Return: as dispatch.lua's, always full records (10 doubles per check),
        then the call's now. A leased check is probed as dispatch would
        decide it (a lease's take and give-back computed and dropped); the
        gateway probes its limits as exact ones.

  one MGET reads every string state; each check is judged by dispatch's own
  check_one (the algorithm's pure check; a sorted set's load only reads it):
    locked   = enforced checks with a lockout whose lock runs: locked_out
    rejected = enforced checks not locked whose verdict is not allowed
  nothing locked or rejected: the answers as they are
  otherwise: an allowed check answers not_consumed (what it would not
             take, given back to its remaining); a rejected check with a
             lockout answers locked_out with the lock's length when its
             strike (lock_strike, computed and dropped) would start one

For example, a fixed window of 5 per hour with `lockout: { after: 3 }`, a
client who used 5 and was rejected twice: the answer is locked_out,
lock_started 1, retry_after the lock's length; the client's lockout key
still holds 2 strikes afterwards, and its TTL is the one it had.
]]

-- The doubles per check in dispatch.lua's answer (check_one writes them
-- at OUT[out + 1 .. out + P_WIDTH]); the offsets below are its fields'.
local P_WIDTH = W
local P_STATUS, P_STARTED, P_DELAY, P_LIMIT = 1, 2, 3, 4
local P_WINDOW, P_REMAINING, P_RESET, P_RETRY, P_GROWS, P_TAKEN = 5, 6, 7, 8, 9, 10

-- What dispatch.lua would answer check c (its answer at OUT[o + 1 ..])
-- once another check blocked the request, the lockout's strike computed
-- from the stored state in vals and dropped.
local function probe_blocked(vals, c, o, now)
  local sp, st = D_SPEC[c], OUT[o + P_STATUS]
  if st == ALLOWED then
    local taken = OUT[o + P_TAKEN] > 0 and OUT[o + P_TAKEN] or sp.taken
    OUT[o + P_STATUS], OUT[o + P_DELAY], OUT[o + P_TAKEN] = NOT_CONSUMED, 0, 0
    OUT[o + P_REMAINING] = min(OUT[o + P_REMAINING] + taken, OUT[o + P_LIMIT])
  elseif st == REJECTED and sp.locks then
    local n, s, lu, lv = lock_parse(vals[D_LAT[c]])
    local _, _, _, _, length = lock_strike(n, s, lu, lv, now, sp.after, sp.within,
      sp.duration, sp.escalate, sp.max_duration, sp.forget_after)
    if length ~= nil then
      OUT[o + P_STATUS], OUT[o + P_STARTED], OUT[o + P_REMAINING] = LOCKED_OUT, 1, 0
      OUT[o + P_RESET], OUT[o + P_RETRY] = min(length, OUT[o + P_WINDOW]), length
      OUT[o + P_GROWS] = length
    end
  end
end

local function probe(KEYS, ARGV)
  local nargs = #ARGV
  if nargs < 4 or ARGV[2] ~= '1' then
    return redis.error_reply('ERR tollgate: probe: ARGV must start with now, 1, n')
  end
  if #KEYS < 1 then fail('probe: no KEYS') end
  local now = now_arg(ARGV[1])
  local n = SMALL[ARGV[3]] or int(ARGV[3], 'probe: n')
  if n < 1 then fail('probe: a request of no checks') end
  local vals = redis.call('MGET', unpack(KEYS))
  local i, k, blocked, status = 4, 1, false, nil
  for c = 1, n do
    i, k, status = check_one(KEYS, ARGV, vals, false, i, k, c, now, P_WIDTH * (c - 1), true)
    if status == REJECTED or status == LOCKED_OUT then blocked = true end
  end
  if i ~= nargs + 1 then
    fail('probe: ' .. n .. ' checks take ' .. (i - 1) .. ' arguments, got ' .. nargs)
  end
  if k ~= #KEYS + 1 then
    fail('probe: the checks need ' .. (k - 1) .. ' KEYS (a state key each, a lockout key '
      .. 'each with a lockout), got ' .. #KEYS)
  end
  if blocked then
    for c = 1, n do probe_blocked(vals, c, P_WIDTH * (c - 1), now) end
  end
  local out = P_WIDTH * n
  OUT[out + 1] = now
  return spack('<' .. string.rep('d', out + 1), unpack(OUT, 1, out + 1))
end
