-- Append one feedback entry to the stream of every model it is for (a model, or every model
-- of a group), unless its idempotency key was seen within the window.
-- KEYS[1] the key's record, KEYS[2..n+1] the models' meta hashes, KEYS[n+2..2n+1] their
-- streams (all of one hash tag)
-- ARGV[1] the encoded entry, ARGV[2] the record to keep ("<digest> <accepted>"),
-- ARGV[3] the window in seconds, ARGV[4] n, ARGV[5] '1' if the request has a key
-- Returns {1, ''} when appended, {0, stored record} when the key was seen, {-1, meta} when a
-- model is gone (deleted meanwhile): nothing is appended then. The check, the XADDs and the
-- record are one atomic step, so a retry can never append a second time, even when the first
-- attempt's answer was lost (a client timeout while Redis stalled).
-- The arguments are checked before the first write (checks.lua), and so are the types of the
-- streams after the first: an XADD to a key of another type failed after the XADDs before it,
-- and a window of 0 failed the SET after every XADD (a retry appended again). The first
-- stream and the record need no TYPE: their command fails before anything is written.
local n, problem = checked('append', function()
  if #ARGV ~= 5 then refuse('not 5 arguments, but', #ARGV) end
  local count = whole('ARGV[4] n', ARGV[4], 1)
  if #KEYS ~= 2 * count + 1 then refuse('not 2n + 1 keys for n = ' .. count .. ', but', #KEYS) end
  if ARGV[5] ~= '0' and ARGV[5] ~= '1' then refuse('ARGV[5] is neither 0 nor 1', ARGV[5]) end
  if ARGV[5] == '1' then
    whole('ARGV[3] window (s)', ARGV[3], 1)
    if ARGV[2] == '' then refuse('ARGV[2] record is empty', '') end
  end
  for i = count + 3, 2 * count + 1 do kind(KEYS[i], 'stream') end
  return count
end)
if problem then return redis.error_reply(problem) end
local keyed = ARGV[5] == '1'
if keyed then
    local seen = redis.call('GET', KEYS[1])
    if seen then
        return {0, seen}
    end
end
for i = 2, n + 1 do
    if redis.call('EXISTS', KEYS[i]) == 0 then
        return {-1, KEYS[i]}
    end
end
for i = n + 2, 2 * n + 1 do
    redis.call('XADD', KEYS[i], '*', 'b', ARGV[1])
end
if keyed then
    redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
end
return {1, ''}
