-- Close the windows that are due: each impression still unlabelled is appended to every
-- stream as a negative (label 0, as it was logged) or dropped, and becomes a tombstone.
-- KEYS[1] the pending set, KEYS[2 ..] the streams
-- ARGV[1] the impression key prefix (same hash tag), ARGV[2] most ids to take,
-- ARGV[3] 'negative' or 'drop', ARGV[4] the window in ms (how long tombstones stay)
-- Returns {taken, closed, expired}: ids taken off the pending set, windows closed, and ids whose impression had expired already
-- (the sweep ran more than a window late). Atomic, so any worker may run it at any time.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, tonumber(ARGV[2]))
local negative = ARGV[3] == 'negative'
local state = negative and 'negative' or 'dropped'
local closed, expired = 0, 0
for _, id in ipairs(ids) do
    local key = ARGV[1] .. id
    local fields = redis.call('HMGET', key, 's', 'b', 'p', 'm')
    if fields[1] == 'pending' then
        if negative then
            for s = 2, #KEYS do
                redis.call('XADD', KEYS[s], '*', 'b', fields[2], 'p', fields[3], 'm', fields[4],
                    'i', id)
            end
        end
        redis.call('HDEL', key, 'b', 'p')
        redis.call('HSET', key, 's', state)
        redis.call('PEXPIRE', key, tonumber(ARGV[4]))
        closed = closed + 1
    elseif not fields[1] then
        expired = expired + 1
    end
    redis.call('ZREM', KEYS[1], id)
end
return {#ids, closed, expired}
