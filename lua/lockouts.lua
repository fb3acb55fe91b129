--[[ lockouts.lua: the clients locked out now, for the admin API
(GET /lockouts), from the index dispatch.lua keeps.

Called as `FCALL tollgate_<hash>_lockouts <number of KEYS> KEYS... ARGV...`
(see common.lua for the library).

KEYS (1): the lockout index "<prefix>:lockouts" (member = the 32 hex of a
          (limit, client), score = the end of its lockout).
ARGV (1): now (µs; '' = Redis TIME).
Return: {hex, remaining µs, hex, remaining µs, ...}, the soonest to end
        first. Entries whose lockout has ended are dropped from the index.
]]

local function lockouts(KEYS, ARGV)
  if #KEYS ~= 1 or #ARGV ~= 1 then
    return redis.error_reply('ERR tollgate: lockouts: expected 1 KEYS (the index) and '
      .. '1 ARGV (now), got ' .. #KEYS .. ' and ' .. #ARGV)
  end
  local now = now_arg(ARGV[1])
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', fmt(now))
  local raw = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  local out = {}
  for i = 1, #raw, 2 do
    out[#out + 1] = raw[i]
    out[#out + 1] = tonumber(raw[i + 1]) - now
  end
  return out
end
