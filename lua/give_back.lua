--[[ give_back.lua: what leases did not spend, back to the store when they
end outside a decision: their ttl ran out, the instance's table was full, a
reload, a shutdown (docs/scaling-out.md, "Leased limits"). A lease that
ends because its key needs a new one gives back inside that dispatch call
instead (dispatch.lua).

Called as `FCALL tollgate_<hash>_give_back <number of KEYS> KEYS... ARGV...`
(see common.lua for the library).

KEYS: the state key "<prefix>:{<32 hex>}:s" of each lease, all of one slot
      on Redis Cluster.
ARGV: now (µs; '' = Redis TIME), then for each key: its check's spec (as
      in dispatch.lua), the units left and when the lease was taken (µs).
Return: the number of leases whose units went back (units of a window
        that has ended lapsed with it and count for nothing).

  for each lease: st', ttl = lease_give_back(GET key, at, now, units)
                  (lease.lua: a settlement of -units, never below empty)
                  SET key st' PX ttl (DEL when nothing is left to keep)

Every argument is read and checked before anything is written: a malformed
call gives nothing back.
]]

-- Each lease's spec, units and time, filled by the first pass.
local G_SPEC, G_UNITS, G_AT = {}, {}, {}

local function give_back(KEYS, ARGV)
  local nkeys = #KEYS
  if #ARGV ~= 1 + 3 * nkeys then
    return redis.error_reply('ERR tollgate: give_back: expected now, then a spec, units and '
      .. 'time per key: ' .. (1 + 3 * nkeys) .. ' ARGV for ' .. nkeys .. ' KEYS, got ' .. #ARGV)
  end
  local now = now_arg(ARGV[1])
  for j = 1, nkeys do
    local i = 2 + 3 * (j - 1)
    local sp = SPECS[ARGV[i]] or spec(ARGV[i])
    if not LEASABLE[sp.name] then fail('give_back: ' .. sp.name .. ' takes no leases') end
    G_SPEC[j], G_UNITS[j] = sp, int(ARGV[i + 1], 'give_back: units')
    G_AT[j] = int(ARGV[i + 2], 'give_back: time')
  end
  local n = 0
  for j = 1, nkeys do
    local sp, units, at = G_SPEC[j], G_UNITS[j], G_AT[j]
    G_SPEC[j], G_UNITS[j], G_AT[j] = nil, nil, nil
    local key = KEYS[j]
    local st, ttl, applied = lease_give_back(sp.algo, sp.name, read('GET', key), at, now,
      units, sp.p1, sp.p2, sp.p3, sp.p4)
    if applied ~= nil then
      put(key, st, ttl)
      n = n + 1
    end
  end
  return n
end
