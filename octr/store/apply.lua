-- Apply one committed change (commit number ARGV[1]) to state shards: HSET of the touched
-- features' new values. A shard that has already applied this commit or a later one skips
-- it, so replaying the redo log after a crash, or a stale learner's late call, is harmless.
-- KEYS: the 'applied' key of each shard. ARGV: 1 seq, 2 field bytes, 3 value bytes, then per
-- shard in KEYS order its bucket key prefix and its records (u32 bucket, field, value),
-- sorted by bucket. Returns how many shards applied it now.
local seq, field_bytes, value_bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local record = 4 + field_bytes + value_bytes
local applied = 0
for shard = 1, #KEYS do
  if tonumber(redis.call('GET', KEYS[shard]) or '0') < seq then
    local prefix, records = ARGV[2 + 2 * shard], ARGV[3 + 2 * shard]
    -- One HSET per bucket with all of its touched fields (records are sorted by bucket).
    local args, current = {}, nil
    for i = 1, #records / record do
      local at = (i - 1) * record
      local bucket = struct.unpack('<I4', records, at + 1)
      if bucket ~= current and current then
        redis.call('HSET', prefix .. current, unpack(args))
        args = {}
      end
      current = bucket
      args[#args + 1] = string.sub(records, at + 5, at + 4 + field_bytes)
      args[#args + 1] = string.sub(records, at + 5 + field_bytes, at + record)
    end
    if current then redis.call('HSET', prefix .. current, unpack(args)) end
    redis.call('SET', KEYS[shard], ARGV[1])
    applied = applied + 1
  end
end
return applied
