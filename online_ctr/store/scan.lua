-- Read a run of one shard's bucket hashes whole, for an export or an import's recount: every
-- field and value of buckets ARGV[2], ARGV[2] + ARGV[3], ... below ARGV[4], until about
-- ARGV[5] fields are gathered (so one call never keeps Redis busy long). A bucket of more
-- than ARGV[6] fields is not read here but named, for HSCAN to page through.
-- KEYS[1]: the shard's route key (online_ctr/store/keys.py: routes the call on a cluster; the
-- buckets share its tag). ARGV: 1 bucket key prefix, 2 first bucket, 3 step (the shard count), 4 end, 5 field
-- budget, 6 largest bucket read whole.
-- Returns {next bucket (-1: done), fields back to back, values back to back, per bucket read
-- (u32 bucket, u32 fields), the large buckets space-separated}.
local prefix, bucket, step = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local stop, budget, whole = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local call, pack = redis.call, struct.pack
local fields, values, counts, large = {}, {}, {}, {}
local taken = 0
while bucket < stop and taken < budget do
  local key = prefix .. bucket
  local size = call('HLEN', key)
  if size > whole then
    large[#large + 1] = tostring(bucket)
  elseif size > 0 then
    local all = call('HGETALL', key)
    for i = 1, #all, 2 do
      fields[#fields + 1] = all[i]
      values[#values + 1] = all[i + 1]
    end
    counts[#counts + 1] = pack('<I4I4', bucket, size)
    taken = taken + size
  end
  bucket = bucket + step
end
if bucket >= stop then bucket = -1 end
return {bucket, table.concat(fields), table.concat(values), table.concat(counts),
  table.concat(large, ' ')}
