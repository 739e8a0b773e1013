-- Read features' state from their buckets: HGET of exactly the fields asked for.
-- KEYS: on Redis Cluster the 'applied' key of the one shard the records are in (declared so
-- the cluster routes the call there); on a single Redis none, and the records may be of any
-- shards. ARGV: 1 field bytes, 2 value bytes, 3 and 4 what comes before and after a shard's
-- number in its bucket key prefix, 5 the records (u16 shard, u32 bucket, field), in any order.
-- Returns the values back to back in the records' order (zeros for a feature never stored),
-- then one byte per record, 1 if the feature is stored. (bucket_key: buckets.lua, prepended.)
-- One flat pass, not a part per shard: a single /predict touches ~40 of 64 shards with one
-- feature each, and per-shard tables and arguments were most of its cost.
local field_bytes, value_bytes = tonumber(ARGV[1]), tonumber(ARGV[2])
local head, tail, records = ARGV[3], ARGV[4], ARGV[5]
local record, format = 6 + field_bytes, '<I2I4c' .. field_bytes
local zero = string.rep('\0', value_bytes)
local call, unpack_record = redis.call, struct.unpack
local prefixes, values, present = {}, {}, {}
for i = 1, #records / record do
  local shard, bucket, field = unpack_record(format, records, (i - 1) * record + 1)
  local prefix = prefixes[shard]
  if not prefix then
    prefix = head .. shard .. tail
    prefixes[shard] = prefix
  end
  local value = call('HGET', bucket_key(prefix, bucket), field)
  if value then
    values[i], present[i] = value, '\1'
  else
    values[i], present[i] = zero, '\0'
  end
end
return {table.concat(values), table.concat(present)}
