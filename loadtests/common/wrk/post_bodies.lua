-- POST JSON bodies to the URL's path, cycling through a file of bodies (one per line), and
-- print one machine-readable summary line at the end (parsed by loadtests.common.tools.parse_wrk).
-- Usage: wrk -t1 -c32 -d10s -s loadtests/common/wrk/post_bodies.lua URL -- BODIES_FILE
-- The requests are formatted once in init(): request() only hands out prebuilt strings, so
-- the generator spends its time on the sockets, not in Lua.
local prepared = {}
local position = 1

function init(args)
  local path = args[1]
  assert(path, "usage: wrk ... -s post_bodies.lua URL -- BODIES_FILE")
  local file = assert(io.open(path, "r"))
  local headers = { ["Content-Type"] = "application/json" }
  for line in file:lines() do
    if #line > 0 then
      prepared[#prepared + 1] = wrk.format("POST", nil, headers, line)
    end
  end
  file:close()
  assert(#prepared > 0, "no bodies in " .. path)
  -- Threads start at different bodies, so they do not all send the same one at once.
  position = (math.random(#prepared) - 1) % #prepared + 1
end

function request()
  local r = prepared[position]
  position = position % #prepared + 1
  return r
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_SUMMARY {"requests": %d, "duration_us": %d, "bytes": %d, "connect_errors": %d, '
      .. '"read_errors": %d, "write_errors": %d, "status_errors": %d, "timeouts": %d, '
      .. '"latency_p50_us": %d, "latency_p90_us": %d, "latency_p99_us": %d, '
      .. '"latency_mean_us": %.1f, "latency_max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status,
    e.timeout, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.mean, latency.max
  ))
end
