-- Apply one committed change (commit number ARGV[1]) to state shards: HSET of the touched
-- features' new values. A shard that has already applied this commit or a later one skips
-- it, so replaying the redo log after a crash, or a stale learner's late call, is harmless.
-- KEYS: the 'applied' key of each shard. ARGV: 1 seq, 2 field bytes, 3 value bytes, then per
-- shard in KEYS order its bucket key prefix and its records (u32 bucket, field, value),
-- sorted by bucket. Returns how many shards applied it now. (bucket_key: buckets.lua.)
local seq, field_bytes, value_bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local record = 4 + field_bytes + value_bytes
local format = '<I4c' .. field_bytes .. 'c' .. value_bytes
local call, unpack_record = redis.call, struct.unpack
-- One HSET per bucket: records are sorted by bucket, so a bucket's features are adjacent.
-- Its field-value pairs go in 'args' (reused, its first 'n' entries count), at most 1000
-- fields per HSET: unpack() has a stack limit.
local args, n = {}, 0
local applied = 0
for shard = 1, #KEYS do
  if tonumber(call('GET', KEYS[shard]) or '0') < seq then
    local prefix, records = ARGV[2 + 2 * shard], ARGV[3 + 2 * shard]
    local current
    for i = 1, #records / record do
      local bucket, field, value = unpack_record(format, records, (i - 1) * record + 1)
      if bucket ~= current or n == 2000 then
        if n > 0 then call('HSET', bucket_key(prefix, current), unpack(args, 1, n)) end
        current, n = bucket, 0
      end
      args[n + 1], args[n + 2], n = field, value, n + 2
    end
    if n > 0 then call('HSET', bucket_key(prefix, current), unpack(args, 1, n)) end
    n = 0
    call('SET', KEYS[shard], ARGV[1])
    applied = applied + 1
  end
end
return applied
