-- Read features' state from their buckets: HGET of exactly the fields asked for.
-- KEYS: the 'applied' key of each shard read (declared so Redis Cluster routes the call; on a
-- cluster every call names one shard). ARGV: 1 field bytes, 2 value bytes, then per shard in
-- KEYS order its bucket key prefix and its records (u32 bucket, field), sorted by bucket.
-- Returns per shard: the values back to back (zeros for a feature never stored), then one
-- byte per record, 1 if the feature is stored.
local field_bytes, value_bytes = tonumber(ARGV[1]), tonumber(ARGV[2])
local record = 4 + field_bytes
local zero = string.rep('\0', value_bytes)
local out = {}
for shard = 1, #KEYS do
  local prefix, records = ARGV[1 + 2 * shard], ARGV[2 + 2 * shard]
  local values, present = {}, {}
  for i = 1, #records / record do
    local at = (i - 1) * record
    local bucket = struct.unpack('<I4', records, at + 1)
    local value = redis.call('HGET', prefix .. bucket, string.sub(records, at + 5, at + record))
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
