-- Apply a computed batch and acknowledge its stream entries, atomically.
-- The batch was computed from the model at step ARGV[3] (epoch ARGV[4]); if any other batch
-- committed since, the step has moved and nothing is written ("conflict": recompute from
-- fresh state). If any of the entries is no longer pending for this consumer (another worker
-- reclaimed it), nothing is written either ("fenced"): the batch now belongs to someone else.
-- KEYS: 1 meta, 2 stream, 3 expiry, 4 failures.
-- ARGV: 1 group, 2 consumer, 3 expected t, 4 expected epoch, 5 examples in the batch,
--       6 its log-loss sum, 7 per bucket written two u32 (number, size in bytes), 8 the new
--       bucket values back to back, 9 ids leaving the expiry set, 10 ids entering it, 11 their
--       expiry steps (f64), 12 change of nnz_stable, 13 change of tracked, 14 bucket key
--       prefix, 15 the stream entry ids, space-separated, 16 the claims counter from before
--       the entries were taken, or '' to check each entry's owner regardless.
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
if t ~= tonumber(ARGV[3]) or (version[2] or '') ~= ARGV[4] then
  return {'conflict', tostring(t)}
end

local entries = {}
for id in string.gmatch(ARGV[15], '%S+') do entries[#entries + 1] = id end
-- Entries change hands only by reclaim.lua, which bumps 'claims': if it has not moved since
-- the entries were taken, they are still ours and the owner check can be skipped.
local unclaimed = ARGV[16] ~= '' and (redis.call('HGET', meta, 'claims') or '0') == ARGV[16]
if #entries > 0 and not unclaimed then
  local mine = {}
  local pending = redis.call('XPENDING', stream, group, entries[1], entries[#entries],
    #entries + 10000, consumer)
  for _, p in ipairs(pending) do mine[p[1]] = true end
  for _, id in ipairs(entries) do
    if not mine[id] then return {'fenced', id} end
  end
end

local runs, values, prefix = ARGV[7], ARGV[8], ARGV[14]
local at = 1
for b = 1, #runs / 8 do
  local bucket, size = struct.unpack('<I4I4', runs, 8 * b - 7)
  redis.call('SET', prefix .. bucket, string.sub(values, at, at + size - 1))
  at = at + size
end

local leaving, entering, steps = ARGV[9], ARGV[10], ARGV[11]
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

local new_t = t + tonumber(ARGV[5])
redis.call('ZREMRANGEBYSCORE', expiry, '-inf', string.format('%.17g', new_t))
redis.call('HSET', meta, 't', string.format('%.17g', new_t))
local logloss = redis.call('HINCRBYFLOAT', meta, 'logloss_sum', ARGV[6])
local stable = redis.call('HINCRBY', meta, 'nnz_stable', ARGV[12])
local tracked = redis.call('HINCRBY', meta, 'tracked', ARGV[13])
each_chunk(entries, 1000, 'XACK', stream, group)
each_chunk(entries, 1000, 'XDEL', stream)
each_chunk(entries, 1000, 'HDEL', failures)
return {'ok', string.format('%.17g', new_t), stable + redis.call('ZCARD', expiry), tracked, logloss}
