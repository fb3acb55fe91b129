--[[ release.lua: give back a concurrency lease (the response ended or the
client went). Mirrors concurrency::release (crates/limit/src/algorithm/concurrency.rs).

Called as `FCALL tollgate_<hash>_release <number of KEYS> KEYS... ARGV...`
(see common.lua for the library).

KEYS (1): the state key "<prefix>:{<32 hex>}:s" of a concurrency limit.
ARGV (2): the lease id (a decimal u64), now (µs; '' = Redis TIME).
Return: 1 if the lease was still held, else 0. Expired leases are dropped
too, and the key's TTL is set to its last lease's expiry (deleted if none).
Releasing a lease that is not held is harmless.
]]

local function release(KEYS, ARGV)
  if #KEYS ~= 1 or #ARGV ~= 2 then
    return redis.error_reply('ERR tollgate: release: expected 1 KEYS (the state key) and '
      .. '2 ARGV (lease, now), got ' .. #KEYS .. ' and ' .. #ARGV)
  end
  return ALGO.concurrency.release(KEYS[1], ARGV[1], now_arg(ARGV[2]))
end
