-- Read features' state from their buckets: HGET of exactly the fields asked for.
-- KEYS: the 'applied' key of each shard read (declared so Redis Cluster routes the call; on a
-- cluster every call names one shard). ARGV: 1 field bytes, 2 value bytes, then per shard in
-- KEYS order its bucket key prefix and its records (u32 bucket, field), sorted by bucket.
-- Returns per shard: the values back to back (zeros for a feature never stored), then one
-- byte per record, 1 if the feature is stored. (bucket_key: buckets.lua, prepended.)
local field_bytes, value_bytes = tonumber(ARGV[1]), tonumber(ARGV[2])
local record, format = 4 + field_bytes, '<I4c' .. field_bytes
local zero = string.rep('\0', value_bytes)
local call, unpack_record = redis.call, struct.unpack
local out = {}
for shard = 1, #KEYS do
  local prefix, records = ARGV[1 + 2 * shard], ARGV[2 + 2 * shard]
  local values, present = {}, {}
  for i = 1, #records / record do
    local bucket, field = unpack_record(format, records, (i - 1) * record + 1)
    local value = call('HGET', bucket_key(prefix, bucket), field)
    if value then
      values[i], present[i] = value, '\1'
    else
      values[i], present[i] = zero, '\0'
    end
  end
  out[#out + 1] = table.concat(values)
  out[#out + 1] = table.concat(present)
end
return out
