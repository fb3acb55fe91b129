--[[ inspect.lua: read the stored state of one (limit, client), for the admin
API (GET /limits/...). Reads only.

Called as `FCALL tollgate_<hash>_inspect <number of KEYS> KEYS... ARGV...`
(see common.lua for the library).

KEYS (2): the state key "<prefix>:{<32 hex>}:s" and the lockout key
          "<prefix>:{<32 hex>}:l".
ARGV (1): the limit's algorithm (as in dispatch.lua).
Return: {found, state, lock}: found is 1 if the state key holds a state of
        this algorithm, else 0 (a fresh key, or one holding another's
        state); state is its fields, the algorithm's decode() or encode() of
        it (see each algorithm file; empty when not found); lock is {n, s,
        lu, lv} (zeros when there is none).
]]

local function inspect(KEYS, ARGV)
  if #KEYS ~= 2 or #ARGV ~= 1 then
    return redis.error_reply('ERR tollgate: inspect: expected 2 KEYS (state, lockout) and '
      .. '1 ARGV (algorithm), got ' .. #KEYS .. ' and ' .. #ARGV)
  end
  local algo = ALGO[ARGV[1]]
  if algo == nil then
    return redis.error_reply('ERR tollgate: inspect: unknown algorithm ' .. ARGV[1])
  end
  local found, state = 0, {}
  if algo.zset then
    if key_type(KEYS[1]) ~= 'none' then
      local st = algo.load(KEYS[1])
      if not st.foreign then found, state = 1, algo.encode(st) end
    end
  else
    -- A key of another type reads as nil: not a state of this algorithm.
    local fields = algo.decode(read('GET', KEYS[1]))
    if fields ~= nil then found, state = 1, fields end
  end
  local n, s, lu, lv = lock_parse(read('GET', KEYS[2]))
  return {found, state, {n, s, lu, lv}}
end
