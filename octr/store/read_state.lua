-- Read whole state buckets and the model's version, atomically.
-- KEYS[1] = meta. ARGV[1] = the bucket numbers, u32 each; ARGV[2] = the bucket key prefix.
-- Bucket keys are built here rather than passed as KEYS: a batch reads thousands, and passing
-- each costs the client more than the read. They share the model's hash tag with KEYS[1], so
-- they live in the same cluster slot.
-- Returns {t, epoch, bucket values...}: '' for a bucket never written; the epoch identifies
-- this incarnation of the model (it changes if the model is deleted and created again).
local numbers, prefix = ARGV[1], ARGV[2]
local meta = redis.call('HMGET', KEYS[1], 't', 'epoch')
local out = {meta[1] or '0', meta[2] or ''}
local count = #numbers / 4
-- MGET in chunks: unpack() has a stack limit of a few thousand arguments.
for first = 1, count, 1000 do
  local keys = {}
  for i = first, math.min(first + 999, count) do
    keys[#keys + 1] = prefix .. struct.unpack('<I4', numbers, 4 * i - 3)
  end
  for _, value in ipairs(redis.call('MGET', unpack(keys))) do
    out[#out + 1] = value or ''
  end
end
return out
