-- Read the state of a batch's features and the model's step, atomically.
-- KEYS[1] = meta. ARGV[1] = feature ids, 8 bytes each, grouped by bucket; ARGV[2] = per
-- bucket used, two u32: its number and how many of the ids are in it; ARGV[3] = bytes per
-- state value; ARGV[4] = the bucket key prefix. Bucket keys are built here rather than passed
-- as KEYS: a batch touches thousands, and passing each costs the client more than the read.
-- They share the model's hash tag with KEYS[1], so they live in the same cluster slot.
-- Returns {t, epoch, values}: values has one state value per id, zeros for unknown features;
-- epoch identifies this incarnation of the model (it changes if the model is recreated).
local ids, runs, width, prefix = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local zero = string.rep('\0', width)
local out, pos = {}, 0
for b = 1, #runs / 8 do
  local bucket, count = struct.unpack('<I4I4', runs, 8 * b - 7)
  local fields = {}
  for i = 1, count do
    fields[i] = string.sub(ids, 8 * (pos + i) - 7, 8 * (pos + i))
  end
  -- HMGET in chunks: unpack() has a stack limit of a few thousand arguments.
  for first = 1, count, 1000 do
    local last = math.min(first + 999, count)
    local values = redis.call('HMGET', prefix .. bucket, unpack(fields, first, last))
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
local meta = redis.call('HMGET', KEYS[1], 't', 'epoch')
return {meta[1] or '0', meta[2] or '', table.concat(out)}
