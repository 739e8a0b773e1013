-- Read the state of a batch's features and the model's step, atomically.
-- KEYS[1] = meta; KEYS[2..] = the state buckets used, in the order of the runs below.
-- ARGV[1] = feature ids, 8 bytes each, grouped by bucket;
-- ARGV[2] = u32 per bucket: how many of the ids are in it; ARGV[3] = bytes per state value.
-- Returns {t, values}: values has one state value per id, zeros for unknown features.
local ids, runs, width = ARGV[1], ARGV[2], tonumber(ARGV[3])
local zero = string.rep('\0', width)
local out, pos = {}, 0
for b = 1, #runs / 4 do
  local count = struct.unpack('<I4', runs, 4 * b - 3)
  local fields = {}
  for i = 1, count do
    fields[i] = string.sub(ids, 8 * (pos + i) - 7, 8 * (pos + i))
  end
  -- HMGET in chunks: unpack() has a stack limit of a few thousand arguments.
  for first = 1, count, 1000 do
    local last = math.min(first + 999, count)
    local values = redis.call('HMGET', KEYS[b + 1], unpack(fields, first, last))
    for i = 1, last - first + 1 do
      local v = values[i]
      if v and #v ~= width then
        return redis.error_reply('state value of width ' .. #v .. ' where ' .. width .. ' was expected')
      end
      out[pos + first + i - 1] = v or zero
    end
  end
  pos = pos + count
end
return {redis.call('HGET', KEYS[1], 't') or '0', table.concat(out)}
