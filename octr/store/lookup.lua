-- Look up single features inside their state buckets, and the model's version, atomically.
-- For serving: only the requested rows travel, not whole buckets.
-- KEYS[1] = meta. ARGV[1] = feature ids, 8 bytes each (u64, little endian), grouped by
-- bucket; ARGV[2] = per bucket used two u32: its number and how many of the ids are in it;
-- ARGV[3] = bytes per record (the 8-byte id, then the row); ARGV[4] = the bucket key prefix.
-- Bucket keys are built here, as in read_state.lua (same hash tag, same cluster slot).
-- Returns {t, epoch, rows}: one row per id (without its id), zeros for unknown features.
local ids, runs, size, prefix = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local zero = string.rep('\0', size - 8)

-- Records are sorted by id. Lua numbers hold 53 bits, so ids compare as (high, low) halves.
local function find(blob, low, high)
  local first, last = 0, #blob / size - 1
  while first <= last do
    local middle = math.floor((first + last) / 2)
    local at = middle * size
    local record_low, record_high = struct.unpack('<I4I4', blob, at + 1)
    if record_high == high and record_low == low then
      return string.sub(blob, at + 9, at + size)
    elseif record_high < high or (record_high == high and record_low < low) then
      first = middle + 1
    else
      last = middle - 1
    end
  end
  return zero
end

local out, position = {}, 0
for run = 1, #runs / 8 do
  local bucket, count = struct.unpack('<I4I4', runs, 8 * run - 7)
  local blob = redis.call('GET', prefix .. bucket) or ''
  for i = position + 1, position + count do
    local low, high = struct.unpack('<I4I4', ids, 8 * i - 7)
    out[i] = find(blob, low, high)
  end
  position = position + count
end
local meta = redis.call('HMGET', KEYS[1], 't', 'epoch')
return {meta[1] or '0', meta[2] or '', table.concat(out)}
