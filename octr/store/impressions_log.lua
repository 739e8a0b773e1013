-- Log the impressions of one scoring pass, each waiting for its click until its window closes.
-- KEYS[1] the pending set; KEYS[1 + j] the impression hash of example j (one hash tag)
-- ARGV[1] the window in ms, ARGV[2] the model that served, ARGV[3] R: the requests of the
-- pass, ARGV[3 + 1 .. 3 + R] their example counts, then per example: id, entry, probability
-- Returns the (0-based) examples whose id was already used (pending, labelled or swept, or
-- twice in this pass): their request logs nothing; the others' requests are logged.
local window = tonumber(ARGV[1])
local requests = tonumber(ARGV[3])
local first = 4 + requests  -- ARGV index of example 0's id
local refused, clashes, seen = {}, {}, {}
local j = 0
for r = 1, requests do
    for _ = 1, tonumber(ARGV[3 + r]) do
        local id = ARGV[first + 3 * j]
        if seen[id] or redis.call('EXISTS', KEYS[2 + j]) == 1 then
            refused[r] = true
            clashes[#clashes + 1] = j
        end
        seen[id] = true
        j = j + 1
    end
end
local now = redis.call('TIME')
local deadline = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + window
local scored = {}
j = 0
for r = 1, requests do
    for _ = 1, tonumber(ARGV[3 + r]) do
        if not refused[r] then
            local at = first + 3 * j
            redis.call('HSET', KEYS[2 + j], 'b', ARGV[at + 1], 'p', ARGV[at + 2],
                'm', ARGV[2], 's', 'pending')
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
return clashes
