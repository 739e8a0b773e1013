-- Join clicks to their logged impressions, in order, at most once per idempotency key.
-- KEYS[1] the pending set, KEYS[2] the idempotency record (unused without a key),
-- KEYS[3 .. 2 + S] the streams to append to, then the impression hash of each id in order,
-- then the index of the tag's idempotency records
-- ARGV[1] S, ARGV[2] the window in ms, ARGV[3] the idempotency window in s ('' : no key),
-- ARGV[4] the request's digest, ARGV[5] what an impression whose window closed unswept
-- becomes ('3' negative, '4' dropped), ARGV[6] most idempotency records the tag keeps,
-- ARGV[7] the records' key prefix (idempotency.lua), then per id: id, label
-- Per id an outcome: '0' learned (appended to every stream, then a tombstone), '1' unknown
-- (no impression), '2' repeated (already labelled), '3'/'4' late (learned as a negative /
-- dropped at window close, or about to be). Returns {1, outcomes, dropped} (dropped: records
-- of other keys dropped, oldest first, to keep at most ARGV[6]), or {0, stored record} when
-- the key was seen: a retry never appends twice.
-- Every argument, the keys' types and every impression it labels are checked before the first
-- write (checks.lua): Redis never rolls a script back, and a bad label, a hash without its
-- entry or a key of another type late in the list failed after the ids before it had been
-- appended and closed. The impressions are read once, in a first pass (the read they needed
-- anyway: no command more per id), then labelled from what was read.
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local checks = function()
  if #ARGV < 7 or (#ARGV - 7) % 2 ~= 0 then
    refuse('not 7 arguments and (id, label) pairs, but', #ARGV)
  end
  local a = {
    streams = whole('ARGV[1] S', ARGV[1], 0),
    window = whole('ARGV[2] window (ms)', ARGV[2], 1),
    n = (#ARGV - 7) / 2,
    read = {}, deadlines = {},
  }
  if ARGV[3] ~= '' then whole('ARGV[3] idempotency window (s)', ARGV[3], 1) end
  if ARGV[5] ~= '3' and ARGV[5] ~= '4' then refuse('ARGV[5] is neither 3 nor 4', ARGV[5]) end
  if #KEYS ~= 3 + a.streams + a.n then
    refuse('not 3 + S keys and one per id, but', #KEYS)
  end
  kind(KEYS[1], 'zset')
  if ARGV[3] ~= '' then  -- without a key, KEYS[2] is the pending set again
    kind(KEYS[2], 'string')
    a.most = idem_checked(KEYS[2], KEYS[#KEYS], ARGV[7], ARGV[6])
  end
  for s = 1, a.streams do kind(KEYS[2 + s], 'stream') end
  for j = 1, a.n do
    local id, label = ARGV[6 + 2 * j], ARGV[7 + 2 * j]
    if label ~= '0' and label ~= '1' then refuse('label of ' .. id .. ' is neither 0 nor 1', label) end
    local fields = redis.call('HMGET', KEYS[2 + a.streams + j], 's', 'b', 'p', 'm', 'w')
    if fields[1] == 'pending' then
      local deadline = redis.call('ZSCORE', KEYS[1], id)
      if not (deadline and tonumber(deadline) <= now_ms) then
        -- The label byte sits right after the 10-byte header (see codec.py).
        if not (fields[2] and #fields[2] > 10 and fields[3] and fields[4]) then
          refuse('pending impression lacks its entry, probability or model', id)
        end
        if not negative_weight_ok(fields[5]) then
          refuse('pending impression has a bad weight as a negative', id)
        end
      end
      a.deadlines[j] = deadline
    end
    a.read[j] = fields
  end
  return a
end
local keyed = ARGV[3] ~= ''
if keyed then
    -- Read first: a retry is answered as the first attempt was, whatever it carries.
    local ok, seen = pcall(redis.call, 'GET', KEYS[2])
    if ok and seen then
        return {0, seen}
    end
end
local a, problem = checked('join', checks)
if problem then return redis.error_reply(problem) end
local streams, window = a.streams, a.window
local late = {negative = '3', dropped = '4'}
local outcomes, labelled = {}, {}
for j = 1, a.n do
    local id, label = ARGV[6 + 2 * j], ARGV[7 + 2 * j]
    local key = KEYS[2 + streams + j]
    local fields = a.read[j]
    local state = fields[1]
    local outcome
    if labelled[key] then
        outcome = '2'  -- twice in this request: labelled by its first time
    elseif not state then
        outcome = '1'
    elseif state == 'labelled' then
        outcome = '2'
    elseif state ~= 'pending' then
        outcome = late[state] or '3'
    else
        local deadline = a.deadlines[j]
        if deadline and tonumber(deadline) <= now_ms then
            outcome = ARGV[5]  -- closed, not swept yet: the sweep will do the rest
        else
            -- A click is learned as logged (weight 1); a non-click as its model's negative
            -- sampling says: weighted, or sampled out (then accepted, and not appended).
            local b = fields[2]
            if label == '1' then
                b = string.sub(b, 1, 10) .. '\1' .. string.sub(b, 12)
            else
                b = negative_entry(b, fields[5])
            end
            for s = 1, b and streams or 0 do
                redis.call('XADD', KEYS[2 + s], '*', 'b', b, 'p', fields[3], 'm', fields[4],
                    'i', id)
            end
            -- The tombstone is a new hash: one that held a long entry stays a hashtable
            -- after HDEL (232 B, MEMORY USAGE), where a fresh {m, s} is a listpack (80 B).
            redis.call('DEL', key)
            redis.call('HSET', key, 'm', fields[4], 's', 'labelled')
            redis.call('PEXPIRE', key, window)
            redis.call('ZREM', KEYS[1], id)
            labelled[key] = true
            outcome = '0'
        end
    end
    outcomes[j] = outcome
end
local answer = table.concat(outcomes)
local dropped = 0
if keyed then
    dropped = idem_record(KEYS[2], KEYS[#KEYS], ARGV[7], a.most, tonumber(ARGV[3]),
        ARGV[4] .. ' j' .. answer)
end
return {1, answer, dropped}
