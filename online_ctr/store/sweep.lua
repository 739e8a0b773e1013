-- Close the windows that are due: each impression still unlabelled is appended to every
-- stream as a negative (label 0, as it was logged) or dropped, and becomes a tombstone.
-- KEYS[1] the pending set, KEYS[2 ..] the streams
-- ARGV[1] the impression key prefix (same hash tag), ARGV[2] most ids to take,
-- ARGV[3] 'negative' or 'drop', ARGV[4] the window in ms (how long tombstones stay)
-- Returns {taken, closed, expired}: ids taken off the pending set, windows closed, and ids whose impression had expired already
-- (the sweep ran more than a window late). Atomic, so any worker may run it at any time.
-- Every input, and every impression it closes, is checked before the first write: Redis never
-- rolls a script back (an impression without its entry once failed the XADD half-way).
local function bad(what, value)
    return redis.error_reply('sweep: ' .. what .. ': ' .. tostring(value))
end
local function whole(value)
    return type(value) == 'string' and string.find(value, '^%d+$') and tonumber(value) > 0
end
if not whole(ARGV[2]) then return bad('ARGV[2] most ids is not a whole number', ARGV[2]) end
if not whole(ARGV[4]) then return bad('ARGV[4] window (ms) is not a whole number', ARGV[4]) end
if ARGV[3] ~= 'negative' and ARGV[3] ~= 'drop' then return bad('ARGV[3]', ARGV[3]) end
for s = 1, #KEYS do
    local found = redis.call('TYPE', KEYS[s]).ok
    if found ~= 'none' and found ~= (s == 1 and 'zset' or 'stream') then
        return bad('key ' .. KEYS[s] .. ' is a', found)
    end
end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[2]))
local negative = ARGV[3] == 'negative'
local state = negative and 'negative' or 'dropped'
local read = {}
for j, id in ipairs(ids) do
    local found = redis.call('TYPE', ARGV[1] .. id).ok
    if found ~= 'none' and found ~= 'hash' then return bad('impression ' .. id .. ' is a', found) end
    local fields = redis.call('HMGET', ARGV[1] .. id, 's', 'b', 'p', 'm', 'w')
    if fields[1] == 'pending' and negative and not (fields[2] and fields[3] and fields[4]) then
        return bad('pending impression lacks its entry, probability or model', id)
    end
    if fields[1] == 'pending' and negative and not negative_weight_ok(fields[5], fields[2]) then
        return bad('pending impression has a bad weight as a negative', id)
    end
    read[j] = fields
end
local closed, expired = 0, 0
for j, id in ipairs(ids) do
    local key = ARGV[1] .. id
    local fields = read[j]
    if fields[1] == 'pending' then
        -- As its model's negative sampling says: weighted, or sampled out (not appended).
        local b = negative and negative_entry(fields[2], fields[5])
        if b then
            for s = 2, #KEYS do
                redis.call('XADD', KEYS[s], '*', 'b', b, 'p', fields[3], 'm', fields[4],
                    'i', id)
            end
        end
        -- The tombstone is a new hash {m, s}: after HDEL, one that held a long entry would
        -- stay a hashtable (232 B, MEMORY USAGE) where a fresh one is a listpack (80 B).
        redis.call('DEL', key)
        if fields[4] then
            redis.call('HSET', key, 'm', fields[4], 's', state)
        else
            redis.call('HSET', key, 's', state)
        end
        redis.call('PEXPIRE', key, tonumber(ARGV[4]))
        closed = closed + 1
    elseif not fields[1] then
        expired = expired + 1
    end
    redis.call('ZREM', KEYS[1], id)
end
return {#ids, closed, expired}
