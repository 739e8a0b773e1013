-- Apply one committed change (commit stamp ARGV[1]) to state shards: HSET of the touched
-- features' new values, HDEL of the features it deletes (expired: their records flagged
-- DELETE, 2^30 in the bucket number), and for the features new to the model (those whose
-- bit no earlier commit set) their bit in the shard's existence filter
-- (online_ctr/store/layout.py). A shard that
-- has already applied this commit or a later one skips it, so replaying the redo log after a
-- crash, or a stale learner's late call, is harmless. A commit is its stamp (checks.lua):
-- number and log generation. A shard stamped with a later generation skips it (a stale
-- learner's), one stamped with an earlier one applies it: after the log side went back, new
-- commits reuse numbers a shard has, under a new generation (workers/rollback.py).
-- KEYS: the 'applied' key of each shard.
-- ARGV: 1 commit stamp ('seq' or 'seq generation'), 2 field bytes, 3 value bytes, 4 the
-- model's shard count, 5 buckets per shard,
-- then per shard in KEYS order its bucket key prefix, its records (u32 bucket, with 2^31
-- added where the feature's bit is to be set or 2^30 where it is deleted, field, value),
-- sorted by bucket, and its filter key. Returns how many shards applied it now. (bucket_key: buckets.lua.)
-- Every argument, each shard's 'applied' and filter length are checked first (checks.lua): a
-- call applies wholly or changes nothing. O(shards), no per-record work: the records' values
-- are the learner's, which never sends a non-finite one (workers/learn_group.py).
local function check()
  local c = {
    seq = 0, gen = 0,
    field_bytes = whole('ARGV[2] field bytes', ARGV[2], 1, 64),
    value_bytes = whole('ARGV[3] value bytes', ARGV[3], 1, 1024),
    shards = whole('ARGV[4] shard count', ARGV[4], 1, 65536),
    within = whole('ARGV[5] buckets per shard', ARGV[5], 1),
    todo = {}, filter_bits = {},
  }
  c.seq, c.gen = stamp('ARGV[1] commit', ARGV[1], 1)
  if #ARGV ~= 5 + 3 * #KEYS then refuse('not 3 arguments per shard: argument count', #ARGV) end
  local record = 4 + c.field_bytes + c.value_bytes
  for shard = 1, #KEYS do
    local applied, gen = stamp('shard ' .. KEYS[shard], redis.call('GET', KEYS[shard]) or '0', 0)
    if gen < c.gen or (gen == c.gen and applied < c.seq) then
      local at = 3 + 3 * shard
      records_of('ARGV[' .. (at + 1) .. '] records', ARGV[at + 1], record)
      c.todo[#c.todo + 1] = shard
      c.filter_bits[shard] = 8 * redis.call('STRLEN', ARGV[at + 2])
    end
  end
  return c
end
local c, problem = checked('apply', check)
if problem then return redis.error_reply(problem) end
local seq, field_bytes, value_bytes = c.seq, c.field_bytes, c.value_bytes
local shards, within = c.shards, c.within
local record = 4 + field_bytes + value_bytes
local format = '<I4c' .. field_bytes .. 'c' .. value_bytes
local call, unpack_record, byte, floor = redis.call, struct.unpack, string.byte, math.floor
local decimal = string.format
local NEW, DELETE = 2147483648, 1073741824

-- One HSET per bucket: records are sorted by bucket, so a bucket's features are adjacent.
-- Its field-value pairs go in 'args' (reused, its first 'n' entries count), at most 1000
-- fields per HSET, its deleted fields in 'gone' (the first 'd'), at most 1000 per HDEL, and
-- at most 500 bits per BITFIELD: unpack() has a stack limit. A bit's offset goes as a string
-- written with '%d': a number argument would be written by Redis with '%.17g', a
-- floating-point conversion several times as dear. A commit never writes and deletes one
-- feature, so the HDEL and HSET of a bucket can go in either order.
local args, n, bits, m, gone, d = {}, 0, {}, 0, {}, 0
local function flush(prefix, bucket)
  if n > 0 then call('HSET', bucket_key(prefix, bucket), unpack(args, 1, n)) end
  if d > 0 then call('HDEL', bucket_key(prefix, bucket), unpack(gone, 1, d)) end
  n, d = 0, 0
end
local applied = 0
for _, shard in ipairs(c.todo) do
  local at = 3 + 3 * shard
  local prefix, records, filter = ARGV[at], ARGV[at + 1], ARGV[at + 2]
  -- Where a bit goes follows from the filter's length (filter_spread in layout.py). A
  -- filter is made with its model, never here: one that is gone (length 0) stays gone (its
  -- shard is then read as before, see online_ctr/store/filter.py), since made again here it
  -- would lack the bits set before.
  local filter_bits = c.filter_bits[shard]
  local spread = 128
  if filter_bits > 128 * within then spread = math.min(256, math.ceil(filter_bits / within)) end
  local current
  for i = 1, #records / record do
    local bucket, field, value = unpack_record(format, records, (i - 1) * record + 1)
    local new, deleted = bucket >= NEW, false
    if new then bucket = bucket - NEW end
    -- A feature stored and deleted by commits applied together still has its bit set: the
    -- learner counts on it (workers/committer.py).
    if bucket >= DELETE then bucket, deleted = bucket - DELETE, true end
    if new and filter_bits > 0 then
      local bit = (floor(bucket / shards) + within * (byte(field, 1) % spread)) % filter_bits
      bits[m + 1], bits[m + 2], bits[m + 3], bits[m + 4] = 'SET', 'u1', decimal('%d', bit), '1'
      m = m + 4
      if m == 2000 then
        call('BITFIELD', filter, unpack(bits, 1, m))
        m = 0
      end
    end
    if bucket ~= current or n == 2000 or d == 1000 then
      flush(prefix, current)
      current = bucket
    end
    if deleted then
      gone[d + 1], d = field, d + 1
    else
      args[n + 1], args[n + 2], n = field, value, n + 2
    end
  end
  flush(prefix, current)
  if m > 0 then call('BITFIELD', filter, unpack(bits, 1, m)) end
  m = 0
  call('SET', KEYS[shard], ARGV[1])
  applied = applied + 1
end
return applied
