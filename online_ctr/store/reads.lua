-- Read features' state from their buckets: HGET of exactly the fields asked for.
-- 'records' are u16 shard, u32 bucket, field ('field_bytes' of it), in any order; 'head' and
-- 'tail' what comes before and after a shard's number in its bucket key prefix.
-- Returns the values back to back in the records' order (zeros for a feature never stored),
-- and one byte per record, 1 if the feature is stored. (bucket_key: buckets.lua.)
-- One flat pass, not a part per shard: a single /predict touches ~40 of 64 shards with one
-- feature each, and per-shard tables and arguments were most of its cost.
local function read_records(field_bytes, value_bytes, head, tail, records)
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
  return table.concat(values), table.concat(present)
end
