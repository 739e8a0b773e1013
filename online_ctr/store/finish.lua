-- Finish an import: if the import still holds the name (ARGV[1] is its token), describe the
-- model in its meta (pairs of field and value from ARGV[2]) and lift the importing mark;
-- from then on it is an ordinary model. KEYS: 1 meta. Returns 1, or 0 if the name was
-- claimed again or deleted meanwhile.
-- The counters every commit adds to are checked first (checks.lua): a meta whose log-loss sum
-- is NaN, say, would refuse every commit (finalize.lua), so it is refused here, unwritten. So
-- are a feature budget's marks, as finalize.lua reads them: steps and counts >= 0, the
-- cutoff of all features at most that of zero weights, and that at most the step t; and the
-- admission filter's tally: its counters in use, and 8 admission counts (or none), each >= 0.
-- And the base rate's counts: finite, 0 <= base_clicks <= base_examples.
local function count(what, value) return whole(what, value, 0) end
local COUNTERS = {t = whole, seq = whole, nnz_stable = whole, tracked = whole, fence = whole,
  trimmed = whole, logloss_sum = finite, weight_excess = finite, expired = whole,
  predicted_sum = finite, label_sum = finite, base_clicks = finite, base_examples = finite,
  recent_predicted = finite, recent_labels = finite,
  held = count, evicted = count, budget_lowest = count, cut_zero = count, cut_all = count,
  counters_used = count}
local function recent(value)  -- as finalize.lua writes it: '' (none) or 'r0 .. r7'
  local n = 0
  for number in string.gmatch(value, '%S+') do
    n = n + 1
    count('meta field admitted_recent', number)
  end
  if n ~= 0 and n ~= 8 then refuse('meta field admitted_recent has not 8 numbers but', n) end
end
-- The base rate's counts, as finalize.lua writes them: finite, 0 <= clicks <= examples.
local function base_counts(given)
  local clicks, examples = given.base_clicks or 0, given.base_examples or 0
  if clicks < 0 or clicks > examples then
    refuse('meta field base_clicks is not within 0 and base_examples', clicks)
  end
end
local fields, problem = checked('finish', function()
  kind(KEYS[1], 'hash')
  if #ARGV % 2 ~= 1 then refuse('fields and values are not pairs: argument count', #ARGV) end
  local pairs_, given = {}, {}
  for i = 2, #ARGV, 2 do
    local counter = COUNTERS[ARGV[i]]
    if counter then given[ARGV[i]] = counter('meta field ' .. ARGV[i], ARGV[i + 1]) end
    if ARGV[i] == 'admitted_recent' then recent(ARGV[i + 1]) end
    pairs_[#pairs_ + 1], pairs_[#pairs_ + 2] = ARGV[i], ARGV[i + 1]
  end
  local cut_all, cut_zero = given.cut_all or 0, given.cut_zero or 0
  if cut_all > cut_zero then refuse('meta field cut_all is past cut_zero', cut_all) end
  if cut_zero > (given.t or 0) then refuse('meta field cut_zero is past t', cut_zero) end
  base_counts(given)
  return pairs_
end)
if problem then return redis.error_reply(problem) end
local meta = KEYS[1]
if redis.call('HGET', meta, 'importing') ~= ARGV[1] then return 0 end
if #fields > 0 then redis.call('HSET', meta, unpack(fields)) end
redis.call('HDEL', meta, 'importing')
return 1
