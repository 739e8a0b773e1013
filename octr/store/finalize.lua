-- Commit a learned group atomically on the model's log side: record its state change in the
-- redo log, move the step and the counters, and delete the stream entries it learned.
-- Nothing is written unless the caller still holds the learner's fence token (ARGV[1]) and the
-- model is still at the step and epoch the group was learned from: a learner that lost its
-- lease gets 'fenced', one that raced gets 'conflict'.
-- KEYS: 1 meta, 2 stream, 3 expiry, 4 failures, 5 redo, 6 snapshot pins.
-- ARGV: 1 fence, 2 expected t, 3 expected epoch, 4 examples learned, 5 their log-loss sum,
--       6 stream entry ids, space-separated, 7 ids leaving the expiry set (u64 each), 8 ids
--       entering it, 9 their expiry steps (f64), 10 change of nnz_stable, 11 change of
--       tracked, 12 the last commit every shard has applied ('0': none to trim; never one a
--       snapshot export pinned, see pins.lua), 13 the calibration fit refitted over the group
--       ('': the model has none), 14 the histogram it was fitted on, then pairs (redo field
--       's<shard>', that shard's records) for the redo entry.
-- Returns {'ok', seq, t, nonzero weights, features tracked, log-loss sum}.
local meta, stream, expiry, failures, redo = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

-- Call command(prefix..., chunk of items) in chunks: unpack() has a stack limit.
local function each_chunk(items, size, command, ...)
  local prefix = {...}
  for first = 1, #items, size do
    local args = {}
    for _, p in ipairs(prefix) do args[#args + 1] = p end
    for j = first, math.min(first + size - 1, #items) do args[#args + 1] = items[j] end
    redis.call(command, unpack(args))
  end
end

local state = redis.call('HMGET', meta, 'fence', 't', 'epoch')
if (state[1] or '0') ~= ARGV[1] then return {'fenced', state[1] or '0'} end
local t = tonumber(state[2] or '0')
if t ~= tonumber(ARGV[2]) or (state[3] or '') ~= ARGV[3] then
  return {'conflict', tostring(t)}
end

local seq = redis.call('HINCRBY', meta, 'seq', 1)
local fields = {}
for i = 15, #ARGV do fields[#fields + 1] = ARGV[i] end
if #fields > 0 then redis.call('XADD', redo, seq .. '-1', unpack(fields)) end
if ARGV[12] ~= '0' then trim_redo(redo, KEYS[6], meta, tonumber(ARGV[12])) end

local leaving, entering, steps = ARGV[7], ARGV[8], ARGV[9]
local members = {}
for j = 1, #leaving / 8 do members[j] = string.sub(leaving, 8 * j - 7, 8 * j) end
each_chunk(members, 1000, 'ZREM', expiry)
local scored = {}
for j = 1, #entering / 8 do
  -- Steps are whole numbers below 2^53; '%.17g' writes them exactly.
  scored[#scored + 1] = string.format('%.17g', struct.unpack('<d', steps, 8 * j - 7))
  scored[#scored + 1] = string.sub(entering, 8 * j - 7, 8 * j)
end
each_chunk(scored, 1000, 'ZADD', expiry)

local new_t = t + tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', expiry, '-inf', string.format('%.17g', new_t))
redis.call('HSET', meta, 't', string.format('%.17g', new_t))
if ARGV[13] ~= '' then
  redis.call('HSET', meta, 'calibration_fit', ARGV[13], 'calibration_histogram', ARGV[14])
end
local logloss = redis.call('HINCRBYFLOAT', meta, 'logloss_sum', ARGV[5])
local stable = redis.call('HINCRBY', meta, 'nnz_stable', ARGV[10])
local tracked = redis.call('HINCRBY', meta, 'tracked', ARGV[11])
local entries, reasons = {}, {}
for id in string.gmatch(ARGV[6], '%S+') do
  entries[#entries + 1] = id
  reasons[#reasons + 1] = id .. ':why'
end
each_chunk(entries, 1000, 'XDEL', stream)
each_chunk(entries, 1000, 'HDEL', failures)
each_chunk(reasons, 1000, 'HDEL', failures)
return {'ok', seq, string.format('%.17g', new_t), stable + redis.call('ZCARD', expiry),
  tracked, logloss}
