-- The key of a bucket: its shard's key prefix, then the bucket's number in decimal.
-- Lua writes a number with sprintf('%.14g'), about 0.3 us: a third of what reading or writing
-- one feature costs the script. So the decimal is put together from the digits above the last
-- three and the last three, each written once per call and then looked up.
local bucket_high, bucket_low = {}, {}

local function bucket_key(prefix, bucket)
  local high, low = math.floor(bucket / 1000), bucket % 1000
  if high == 0 then
    local digits = bucket_high[low]
    if not digits then
      digits = tostring(low)
      bucket_high[low] = digits
    end
    return prefix .. digits
  end
  local first, last = bucket_high[high], bucket_low[low]
  if not first then
    first = tostring(high)
    bucket_high[high] = first
  end
  if not last then
    last = string.format('%03d', low)
    bucket_low[low] = last
  end
  return prefix .. first .. last
end
