-- Finish an import: if the import still holds the name (ARGV[1] is its token), describe the
-- model in its meta (pairs of field and value from ARGV[2]) and lift the importing mark;
-- from then on it is an ordinary model. KEYS: 1 meta. Returns 1, or 0 if the name was
-- claimed again or deleted meanwhile.
-- The counters every commit adds to are checked first (checks.lua): a meta whose log-loss sum
-- is NaN, say, would refuse every commit (finalize.lua), so it is refused here, unwritten.
local COUNTERS = {t = whole, seq = whole, nnz_stable = whole, tracked = whole, fence = whole,
  trimmed = whole, logloss_sum = finite, weight_excess = finite, expired = whole}
local fields, problem = checked('finish', function()
  kind(KEYS[1], 'hash')
  if #ARGV % 2 ~= 1 then refuse('fields and values are not pairs: argument count', #ARGV) end
  local pairs_ = {}
  for i = 2, #ARGV, 2 do
    local counter = COUNTERS[ARGV[i]]
    if counter then counter('meta field ' .. ARGV[i], ARGV[i + 1]) end
    pairs_[#pairs_ + 1], pairs_[#pairs_ + 2] = ARGV[i], ARGV[i + 1]
  end
  return pairs_
end)
if problem then return redis.error_reply(problem) end
local meta = KEYS[1]
if redis.call('HGET', meta, 'importing') ~= ARGV[1] then return 0 end
if #fields > 0 then redis.call('HSET', meta, unpack(fields)) end
redis.call('HDEL', meta, 'importing')
return 1
