-- Join clicks to their logged impressions, in order, at most once per idempotency key.
-- KEYS[1] the pending set, KEYS[2] the idempotency record (unused without a key),
-- KEYS[3 .. 2 + S] the streams to append to, then the impression hash of each id in order
-- ARGV[1] S, ARGV[2] the window in ms, ARGV[3] the idempotency window in s ('' : no key),
-- ARGV[4] the request's digest, ARGV[5] what an impression whose window closed unswept
-- becomes ('3' negative, '4' dropped), then per id: id, label
-- Per id an outcome: '0' learned (appended to every stream, then a tombstone), '1' unknown
-- (no impression), '2' repeated (already labelled), '3'/'4' late (learned as a negative /
-- dropped at window close, or about to be). Returns {1, outcomes}, or {0, stored record}
-- when the key was seen: a retry never appends twice.
local keyed = ARGV[3] ~= ''
if keyed then
    local seen = redis.call('GET', KEYS[2])
    if seen then
        return {0, seen}
    end
end
local streams = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local late = {negative = '3', dropped = '4'}
local outcomes = {}
local n = (#ARGV - 5) / 2
for j = 1, n do
    local id, label = ARGV[4 + 2 * j], ARGV[5 + 2 * j]
    local key = KEYS[2 + streams + j]
    local fields = redis.call('HMGET', key, 's', 'b', 'p', 'm')
    local state = fields[1]
    local outcome
    if not state then
        outcome = '1'
    elseif state == 'labelled' then
        outcome = '2'
    elseif state ~= 'pending' then
        outcome = late[state] or '3'
    else
        local deadline = redis.call('ZSCORE', KEYS[1], id)
        if deadline and tonumber(deadline) <= now_ms then
            outcome = ARGV[5]  -- closed, not swept yet: the sweep will do the rest
        else
            -- The label byte sits right after the 10-byte header (see codec.py).
            local b = string.sub(fields[2], 1, 10) .. (label == '1' and '\1' or '\0')
                .. string.sub(fields[2], 12)
            for s = 1, streams do
                redis.call('XADD', KEYS[2 + s], '*', 'b', b, 'p', fields[3], 'm', fields[4],
                    'i', id)
            end
            redis.call('HDEL', key, 'b', 'p')
            redis.call('HSET', key, 's', 'labelled')
            redis.call('PEXPIRE', key, window)
            redis.call('ZREM', KEYS[1], id)
            outcome = '0'
        end
    end
    outcomes[j] = outcome
end
local answer = table.concat(outcomes)
if keyed then
    redis.call('SET', KEYS[2], ARGV[4] .. ' j' .. answer, 'EX', ARGV[3])
end
return {1, answer}
