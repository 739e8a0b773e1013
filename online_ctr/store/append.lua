-- Append one feedback entry to the stream of every model it is for (a model, or every model
-- of a group), unless its idempotency key was seen within the window.
-- KEYS[1] the key's record, KEYS[2..n+1] the models' meta hashes, KEYS[n+2..2n+1] their
-- streams, KEYS[2n+2] the index of the tag's records (all of one hash tag)
-- ARGV[1] the encoded entry ('': nothing to append, every example was sampled out; the key
-- is still checked and recorded), ARGV[2] the record to keep ("<digest> <accepted>"),
-- ARGV[3] the window in seconds, ARGV[4] n, ARGV[5] '1' if the request has a key,
-- ARGV[6] most records the tag keeps, ARGV[7] the records' key prefix (idempotency.lua);
-- then optionally ARGV[8..n+6], the entries of streams 2..n when each model's entry differs
-- (models that cross other fields), ARGV[1] being the first stream's
-- Returns {1, '', dropped} when appended (dropped: records of other keys dropped, oldest
-- first, to keep at most ARGV[6]), {0, stored record} when the key was seen, {-1, meta} when
-- a model is gone (deleted meanwhile): nothing is appended then. The check, the XADDs and the
-- record are one atomic step, so a retry can never append a second time, even when the first
-- attempt's answer was lost (a client timeout while Redis stalled).
-- The arguments are checked before the first write (checks.lua), and so are the types of the
-- streams after the first and of the index: an XADD to a key of another type failed after the
-- XADDs before it, and a window of 0 failed the SET after every XADD (a retry appended again).
-- The first stream and the record need no TYPE: their command fails before anything is written.
local n, problem = checked('append', function()
  local count = whole('ARGV[4] n', ARGV[4], 1)
  if #ARGV ~= 7 and #ARGV ~= 6 + count then refuse('not 7 or n + 6 arguments, but', #ARGV) end
  if #KEYS ~= 2 * count + 2 then refuse('not 2n + 2 keys for n = ' .. count .. ', but', #KEYS) end
  if ARGV[5] ~= '0' and ARGV[5] ~= '1' then refuse('ARGV[5] is neither 0 nor 1', ARGV[5]) end
  if ARGV[5] == '1' then
    whole('ARGV[3] window (s)', ARGV[3], 1)
    if ARGV[2] == '' then refuse('ARGV[2] record is empty', '') end
    idem_checked(KEYS[1], KEYS[2 * count + 2], ARGV[7], ARGV[6])
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
local each = #ARGV > 7
for i = n + 2, 2 * n + 1 do
    local entry = ARGV[1]
    if each and i > n + 2 then entry = ARGV[i - n + 5] end
    if entry ~= '' then
        redis.call('XADD', KEYS[i], '*', 'b', entry)
    end
end
local dropped = 0
if keyed then
    local most, window = tonumber(ARGV[6]), tonumber(ARGV[3])
    dropped = idem_record(KEYS[1], KEYS[2 * n + 2], ARGV[7], most, window, ARGV[2])
end
return {1, '', dropped}
