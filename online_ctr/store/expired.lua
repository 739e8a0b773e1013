-- Name the features past their end in a run of one shard's bucket hashes, for the learner's
-- sweep of an expiring model or one with a feature budget (workers/gone_sweep.py): of buckets
-- ARGV[2], ARGV[2] + ARGV[3], ... below ARGV[4], every field whose value's last 8 bytes (the
-- feature's last step, a little-endian float64: online_ctr/learning/retention.py) are at
-- most ARGV[5]. Reads only.
-- KEYS[1]: the shard's 'applied' key (routes the call on a cluster; the buckets share its
-- tag). ARGV: 1 bucket key prefix, 2 first bucket, 3 step (the shard count), 4 end, 5 the
-- last step at or below which a feature is gone (the commit's end less the span), 6 value
-- bytes (at least 8).
-- Returns {per field named, its bucket (u32) back to back; the fields back to back; their
-- values back to back (a budget's sweep judges some by their weight)}.
local function check()
  return {
    bucket = whole('ARGV[2] first bucket', ARGV[2], 0, 16777216),
    step = whole('ARGV[3] step', ARGV[3], 1, 65536),
    stop = whole('ARGV[4] end', ARGV[4], 0, 16777216),
    gone = whole('ARGV[5] last step gone', ARGV[5]),
    value_bytes = whole('ARGV[6] value bytes', ARGV[6], 8, 1024),
  }
end
local a, problem = checked('expired', check)
if problem then return redis.error_reply(problem) end
local call, pack, unpack_step = redis.call, struct.pack, struct.unpack
local at = a.value_bytes - 7
local owners, fields, values = {}, {}, {}
for bucket = a.bucket, a.stop - 1, a.step do
  local all = call('HGETALL', ARGV[1] .. bucket)
  for i = 1, #all, 2 do
    local value = all[i + 1]
    if #value == a.value_bytes and unpack_step('<d', value, at) <= a.gone then
      owners[#owners + 1] = pack('<I4', bucket)
      fields[#fields + 1] = all[i]
      values[#values + 1] = value
    end
  end
end
return {table.concat(owners), table.concat(fields), table.concat(values)}
