-- Append one feedback entry unless its idempotency key was seen within the window.
-- KEYS[1] the model's stream, KEYS[2] the key's record (same {model} slot)
-- ARGV[1] the encoded entry, ARGV[2] the record to keep ("<digest> <accepted>"),
-- ARGV[3] the window in seconds
-- Returns {1, entry id} when appended, {0, stored record} when the key was seen: the check,
-- the XADD and the record are one atomic step, so a retry can never append a second time,
-- even when the first attempt's answer was lost (a client timeout while Redis stalled).
local seen = redis.call('GET', KEYS[2])
if seen then
    return {0, seen}
end
local id = redis.call('XADD', KEYS[1], '*', 'b', ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
return {1, id}
