-- Apply one committed change (commit number ARGV[1]) to state shards: HSET of the touched
-- features' new values. A shard that has already applied this commit or a later one skips
-- it, so replaying the redo log after a crash, or a stale learner's late call, is harmless.
-- KEYS: the 'applied' key of each shard. ARGV: 1 seq, 2 field bytes, 3 value bytes, then per
-- shard in KEYS order its bucket key prefix and its records (u32 bucket, field, value),
-- sorted by bucket. Returns how many shards applied it now.
local seq, field_bytes, value_bytes = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local record = 4 + field_bytes + value_bytes
local call, sub, unpack_bucket = redis.call, string.sub, struct.unpack
local applied = 0
for shard = 1, #KEYS do
  if tonumber(call('GET', KEYS[shard]) or '0') < seq then
    local prefix, records = ARGV[2 + 2 * shard], ARGV[3 + 2 * shard]
    local count = #records / record
    local i = 1
    while i <= count do
      local at = (i - 1) * record
      local bucket = unpack_bucket('<I4', records, at + 1)
      local key = prefix .. bucket
      -- Most buckets get one feature per commit: one HSET each. Records are sorted by
      -- bucket, so a bucket's further features follow and share its HSET.
      local last = i
      while last < count and unpack_bucket('<I4', records, last * record + 1) == bucket do
        last = last + 1
      end
      if last == i then
        call('HSET', key, sub(records, at + 5, at + 4 + field_bytes),
          sub(records, at + 5 + field_bytes, at + record))
      else
        -- In chunks of 1000 fields: unpack() has a stack limit.
        for first = i, last, 1000 do
          local args = {}
          for j = first, math.min(first + 999, last) do
            local from = (j - 1) * record
            args[#args + 1] = sub(records, from + 5, from + 4 + field_bytes)
            args[#args + 1] = sub(records, from + 5 + field_bytes, from + record)
          end
          call('HSET', key, unpack(args))
        end
      end
      i = last + 1
    end
    call('SET', KEYS[shard], ARGV[1])
    applied = applied + 1
  end
end
return applied
