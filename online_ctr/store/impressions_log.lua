-- Log the impressions of one scoring pass, each waiting for its click until its window closes.
-- KEYS[1] the pending set; KEYS[1 + j] the impression hash of example j (one hash tag)
-- ARGV[1] the window in ms, ARGV[2] the model that served, ARGV[3] the most impressions the
-- pending set may hold, ARGV[4] R: the requests of the pass, ARGV[4 + 1 .. 4 + R] their
-- example counts, then per example: id, entry, probability, its weight as a non-click (8
-- bytes of f64, 0: sampled out; '': learned as it is, see negatives.lua)
-- Returns {clashes, unlogged}: the (0-based) examples whose id was already used (pending,
-- labelled or swept, or twice in this pass), whose request logs nothing; and the (0-based)
-- requests left unlogged because they did not fit under the most pending (their impressions
-- are not written; the requests after them that fit still are). The others are logged whole.
-- Every argument is checked before the first write (checks.lua), in the pass that looks for
-- clashes: a window that is no whole number of ms failed the PEXPIRE after the first HSET,
-- and a pending set of another type the ZADD after every impression. An impression key that
-- exists, of any type, is a clash and is not written; only the pending set needs its TYPE.
-- The bound is decided there too, from ZCARD: the pending set holds every pending impression
-- (a hash that expired unswept leaves its member until the sweep), so it bounds them all.
local function fit(a)
  -- Whole requests, first come first logged, while the pending set has room for them.
  local room = a.most - redis.call('ZCARD', KEYS[1])
  for r = 1, a.requests do
    if not a.refused[r] then
      if a.sizes[r] <= room then
        room = room - a.sizes[r]
      else
        a.refused[r] = true
        a.unlogged[#a.unlogged + 1] = r - 1
      end
    end
  end
end
local checks = function()
  if #ARGV < 4 then refuse('fewer than 4 arguments', #ARGV) end
  local a = {
    window = whole('ARGV[1] window (ms)', ARGV[1], 1),
    most = whole('ARGV[3] most pending', ARGV[3], 1),
    requests = whole('ARGV[4] R', ARGV[4], 0),
    sizes = {}, refused = {}, clashes = {}, unlogged = {},
  }
  if ARGV[2] == '' then refuse('ARGV[2] model is empty', '') end
  if #ARGV < 4 + a.requests then refuse('fewer example counts than R, arguments', #ARGV) end
  local examples = 0
  for r = 1, a.requests do
    a.sizes[r] = whole('ARGV[' .. (4 + r) .. '] example count', ARGV[4 + r], 0)
    examples = examples + a.sizes[r]
  end
  a.first = 5 + a.requests  -- ARGV index of example 0's id
  if #ARGV ~= a.first - 1 + 4 * examples then
    refuse('not (id, entry, probability, weight) for the ' .. examples .. ' examples counted, arguments', #ARGV)
  end
  if #KEYS ~= 1 + examples then refuse('not one key per example and the pending set, but', #KEYS) end
  kind(KEYS[1], 'zset')
  local seen = {}
  local j = 0
  for r = 1, a.requests do
    for _ = 1, a.sizes[r] do
      local at = a.first + 4 * j
      local id, entry, p = ARGV[at], ARGV[at + 1], ARGV[at + 2]
      if ARGV[at + 3] ~= '' and not negative_weight_ok(ARGV[at + 3]) then
        refuse('weight as a negative of ' .. id .. ' is not 8 bytes of a finite f64 >= 0', '')
      end
      if id == '' then refuse('id of example ' .. j .. ' is empty', '') end
      if entry == '' then refuse('entry of ' .. id .. ' is empty', '') end
      if #p ~= 8 then refuse('probability of ' .. id .. ' is not 8 bytes, but', #p) end
      local value = struct.unpack('<d', p)
      if not (value >= 0 and value <= 1) then
        refuse('probability of ' .. id .. ' is not in [0, 1]', value)
      end
      if seen[id] or redis.call('EXISTS', KEYS[2 + j]) == 1 then
        a.refused[r] = true
        a.clashes[#a.clashes + 1] = j
      end
      seen[id] = true
      j = j + 1
    end
  end
  fit(a)  -- after the clashes: a request refused for one takes no room
  return a
end
local a, problem = checked('impressions_log', checks)
if problem then return redis.error_reply(problem) end
local window, first, refused = a.window, a.first, a.refused
local now = redis.call('TIME')
local deadline = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + window
local scored = {}
local j = 0
for r = 1, a.requests do
    for _ = 1, a.sizes[r] do
        if not refused[r] then
            local at = first + 4 * j
            redis.call('HSET', KEYS[2 + j], 'b', ARGV[at + 1], 'p', ARGV[at + 2],
                'm', ARGV[2], 's', 'pending')
            if ARGV[at + 3] ~= '' then redis.call('HSET', KEYS[2 + j], 'w', ARGV[at + 3]) end
            redis.call('PEXPIRE', KEYS[2 + j], 2 * window)
            scored[#scored + 1] = deadline
            scored[#scored + 1] = ARGV[at]
            if #scored >= 2000 then  -- Lua's stack holds ~8000 arguments
                redis.call('ZADD', KEYS[1], unpack(scored))
                scored = {}
            end
        end
        j = j + 1
    end
end
if #scored > 0 then
    redis.call('ZADD', KEYS[1], unpack(scored))
end
return {a.clashes, a.unlogged}
