-- Apply a computed batch and acknowledge its stream entries, atomically.
-- The batch was computed from the state at step ARGV[3]; if any other batch committed since,
-- the step has moved and nothing is written ("conflict": recompute from fresh state). If any
-- of the entries is no longer pending for this consumer (another worker reclaimed it), nothing
-- is written either ("fenced"): the batch now belongs to someone else.
-- KEYS: 1 meta, 2 stream, 3 expiry, 4 failures.
-- ARGV: 1 group, 2 consumer, 3 expected t, 4 examples in batch, 5 log-loss sum,
--       6 ids (8 bytes each, grouped by bucket), 7 per bucket two u32 (number, ids in it),
--       8 new values, 9 bytes per value, 10 ids leaving the expiry set, 11 ids entering it,
--       12 their expiry steps (f64), 13 change of nnz_stable, 14 change of tracked,
--       15 bucket key prefix, 16 the stream entry ids, space-separated, 17 expected epoch.
-- Bucket keys are built from the prefix, as in read_state.lua (same hash tag, same slot).
local meta, stream, expiry, failures = KEYS[1], KEYS[2], KEYS[3], KEYS[4]

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
local group, consumer = ARGV[1], ARGV[2]
local version = redis.call('HMGET', meta, 't', 'epoch')
local t = tonumber(version[1] or '0')
if t ~= tonumber(ARGV[3]) or (version[2] or '') ~= ARGV[17] then
  return {'conflict', tostring(t)}
end

local entries = {}
for id in string.gmatch(ARGV[16], '%S+') do entries[#entries + 1] = id end
if #entries > 0 then
  local mine = {}
  local pending = redis.call('XPENDING', stream, group, entries[1], entries[#entries],
    #entries + 10000, consumer)
  for _, p in ipairs(pending) do mine[p[1]] = true end
  for _, id in ipairs(entries) do
    if not mine[id] then return {'fenced', id} end
  end
end

local ids, runs, values, width = ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
local prefix = ARGV[15]
local pos = 0
for b = 1, #runs / 8 do
  local bucket, count = struct.unpack('<I4I4', runs, 8 * b - 7)
  for first = 1, count, 500 do
    local last = math.min(first + 499, count)
    local args = {}
    for i = first, last do
      local j = pos + i
      args[#args + 1] = string.sub(ids, 8 * j - 7, 8 * j)
      args[#args + 1] = string.sub(values, width * (j - 1) + 1, width * j)
    end
    redis.call('HSET', prefix .. bucket, unpack(args))
  end
  pos = pos + count
end

local leaving, entering, steps = ARGV[10], ARGV[11], ARGV[12]
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
local logloss = redis.call('HINCRBYFLOAT', meta, 'logloss_sum', ARGV[5])
local stable = redis.call('HINCRBY', meta, 'nnz_stable', ARGV[13])
local tracked = redis.call('HINCRBY', meta, 'tracked', ARGV[14])
each_chunk(entries, 1000, 'XACK', stream, group)
each_chunk(entries, 1000, 'XDEL', stream)
each_chunk(entries, 1000, 'HDEL', failures)
return {'ok', string.format('%.17g', new_t), stable + redis.call('ZCARD', expiry), tracked, logloss}
