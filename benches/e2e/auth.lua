-- wrk script for benches/e2e/run's credential rows (`--only auth`):
-- report.lua's figures, plus a credential header.
--
--   AUTH_HEADER  the header to set (e.g. "authorization", "x-api-key")
--   AUTH_PREFIX  put before each value (e.g. "Bearer "), default none
--   AUTH_VALUE   one value, sent on every request (the same token or key)
--   AUTH_FILE    a file of values, one per line, cycled: request i sends
--                line i mod N (distinct tokens, or random-looking keys)
--   REPORT_LUA   the path of report.lua (its `done` prints the figures)
--
-- The requests are formatted once, in init, so a request costs wrk a table
-- lookup whichever mode: the load core does about the same work as with
-- report.lua alone, and the rows stay comparable with it.

dofile(os.getenv("REPORT_LUA"))

local header = os.getenv("AUTH_HEADER")
local prefix = os.getenv("AUTH_PREFIX") or ""
local value = os.getenv("AUTH_VALUE") or ""
local file = os.getenv("AUTH_FILE") or ""

local reqs, n, i = {}, 0, 0

-- wrk's own headers (Host with the port, any -H) plus the credential.
local function format(v)
  local h = {}
  for k, x in pairs(wrk.headers) do h[k] = x end
  h[header] = prefix .. v
  return wrk.format(nil, nil, h)
end

init = function(args)
  if file ~= "" then
    for line in io.lines(file) do
      if line ~= "" then
        n = n + 1
        reqs[n] = format(line)
      end
    end
    assert(n > 0, "AUTH_FILE " .. file .. " has no values")
    -- A random start, so a run does not begin with the tokens the last run
    -- (whose verified ones the gateway may still cache) began with.
    math.randomseed(os.time())
    i = math.random(n) - 1
  else
    n = 1
    reqs[1] = format(value)
  end
end

request = function()
  i = i % n + 1
  return reqs[i]
end
