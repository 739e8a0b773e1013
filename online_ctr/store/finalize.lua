-- Commit a learned group atomically on the model's log side: record its state change in the
-- redo log, move the step and the counters, and delete the stream entries it learned.
-- Nothing is written unless the caller still holds the learner's fence token (ARGV[1]) and the
-- model is still at the step and epoch the group was learned from: a learner that lost its
-- lease gets 'fenced', one that raced gets 'conflict'.
-- KEYS: 1 meta, 2 stream, 3 expiry, 4 failures, 5 redo, 6 snapshot pins, 7 touched (per
--       shard, the last commit that writes to it: set here for the commit's shards, the
--       values before kept in the redo entry's field 'prior' as 's<shard>:<commit> ...'),
--       8 the counting Bloom filter of feature admission (a string, one byte per counter),
--       9 the counts of a feature budget (a string, int64 each), 10 the evictable set (the
--       expiry set's members scored by their last step, for a model with a budget).
-- ARGV: 1 fence, 2 expected t, 3 expected epoch, 4 examples learned, 5 their log-loss sum,
--       6 stream entry ids, space-separated, 7 ids leaving the expiry set (u64 each), 8 ids
--       entering it, 9 their expiry steps (f64), 10 change of nnz_stable, 11 change of
--       tracked, 12 the last commit every shard has applied ('0': none to trim; never one a
--       snapshot export pinned, see pins.lua), 13 the calibration fit refitted over the group
--       ('': the model has none), 14 the histogram it was fitted on, 15 the sum over the
--       examples of (importance weight - 1) ('0' when every weight is 1: the meta's field
--       weight_excess is then not written), 16 the admission counters the group changed (u32
--       each, '': none), 17 their new values (a byte each; or, with ARGV[16] '', the whole
--       filter, one byte per counter: a group that halved every counter, bloom:N:D, or
--       changed many), 18 the filter's counter count,
--       19 how many features the group found expired or deleted as expired (added to the
--       meta's field 'expired', written only when nonzero), 20 the budget's slots the group
--       changed (u32 each, '': none), 21 their new values (i64 each; or, with ARGV[20] '',
--       all of them), 22 the budget's slot count (0: the model has no budget, and ARGV[20],
--       21, 23 and 25 are ''), 23 the budget's marks after the group, 'lowest held cut_zero
--       cut_all' (the oldest bin kept, the features held, the cutoffs of zero weights and of
--       all features: steps that only move up, the first at least the second, neither past
--       the group's end), 24
--       how many features it evicted (added to the meta's field 'evicted'), 25 the last steps
--       of the ids entering the expiry set (f64, one per id of ARGV[8]), 26 the admission
--       filter's tally after the group, 'used r0 .. r7' (its counters above 0, and the
--       features it admitted in each of the last 8 halving periods, by period modulo 8; ''
--       for a model without a filter: nothing written), 27 the base rate's counts after the
--       group, 'clicks examples' (finite, 0 <= clicks <= examples: written as given to the meta's
--       fields base_clicks and base_examples; '': nothing written), 28 the group's
--       importance-weighted sums of its predictions and of its labels, then those sums over
--       the recent window after the group, 'predicted labels recent_predicted recent_labels'
--       (finite, >= 0: the first two added to the meta's fields predicted_sum and label_sum,
--       the last two written to recent_predicted and recent_labels), then pairs
--       (redo field 's<shard>', that shard's records) for the redo entry.
-- Returns {'ok', seq, t, nonzero weights, features tracked, log-loss sum}; or, having written
-- nothing, {'fenced', token}, {'conflict', t}, {'refused', why} (an argument is bad) or
-- {'damaged', why} (a stored value is not what finalize writes: no commit can apply).
local meta, stream, expiry, failures, redo = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

-- Call command(prefix..., chunk of items) in chunks: unpack() has a stack limit.
local function each_chunk(items, size, command, ...)
  local prefix = {...}
  for first = 1, #items, size do
    local args = {}
    for _, p in ipairs(prefix) do args[#args + 1] = p end
    for j = first, math.min(first + size - 1, #items) do args[#args + 1] = items[j] end
    redis.call(command, unpack(args))
  end
end

-- The admission counters' writes, as BITFIELD operations ('SET u8 #<counter> <value>', each
-- four items), after checking that each counter is within the filter and each value a byte;
-- or the whole filter (returned as a string), which must have every counter.
local function admission_counters(positions, values, count)
  local most = whole('ARGV[18] admission counter count', count, 1)
  if positions == '' and values ~= '' then
    if #values ~= most then refuse('ARGV[17] whole filter is not ARGV[18] bytes long', #values) end
    return values
  end
  if #positions ~= 4 * #values then
    refuse('ARGV[16] has not 4 bytes per value of ARGV[17], its length', #positions)
  end
  local ops = {}
  for j = 1, #values do
    local at = struct.unpack('<I4', positions, 4 * j - 3)
    if at >= most then refuse('ARGV[16] admission counter past the filter', at) end
    ops[#ops + 1], ops[#ops + 2] = 'SET', 'u8'
    ops[#ops + 1], ops[#ops + 2] = '#' .. at, string.byte(values, j)
  end
  return ops
end

-- The admission filter's tally (ARGV[26]) checked: nil for none, else {used, recent} as text
-- (Lua would write a number of more than 14 digits rounded).
local function admission_tally(text, count)
  if text == '' then return nil end
  local numbers = {}
  for number in string.gmatch(text, '%S+') do
    whole('ARGV[26] admission tally', number, 0)
    numbers[#numbers + 1] = number
  end
  if #numbers ~= 9 then refuse('ARGV[26] has not 9 numbers but', #numbers) end
  if tonumber(numbers[1]) > count then refuse('ARGV[26] counters used past ARGV[18]', numbers[1]) end
  return {used = numbers[1], recent = table.concat(numbers, ' ', 2)}
end

-- The base rate's counts (ARGV[27]) checked: nil for none, else {clicks, examples} as text
-- (Lua would round what it writes of a number; the learner's repr is exact).
local function base_rate(text)
  if text == '' then return nil end
  local texts = {}
  for number in string.gmatch(text, '%S+') do texts[#texts + 1] = number end
  if #texts ~= 2 then refuse('ARGV[27] has not 2 numbers but', #texts) end
  local clicks = finite('ARGV[27] base-rate clicks', texts[1])
  local examples = finite('ARGV[27] base-rate examples', texts[2])
  if clicks < 0 or clicks > examples then
    refuse('ARGV[27] base-rate clicks are not within 0 and the examples', text)
  end
  return texts
end

-- The budget's counts and marks (ARGV[20..25]) checked: nil for a model without a budget,
-- else {slots = SETRANGE offset/value pairs, or whole = the counts, marks, evicted, scored =
-- ZADD score/member pairs of the evictable set}.
local function budget_arguments(entering)
  local size = whole('ARGV[22] budget slot count', ARGV[22], 0, 3 * 1048576)
  local evicted = whole('ARGV[24] features evicted', ARGV[24], 0)
  if size == 0 then
    if ARGV[20] .. ARGV[21] .. ARGV[23] .. ARGV[25] ~= '' or evicted ~= 0 then
      refuse('ARGV[20..25] are for a budget, and ARGV[22] is', 0)
    end
    return nil
  end
  local b = {size = size, evicted = evicted, slots = {}, scored = {}}
  local values = ARGV[21]
  if ARGV[20] == '' and values ~= '' then
    if #values ~= 8 * size then refuse('ARGV[21] whole budget is not 8 bytes a slot', #values) end
    b.whole = values
  elseif #ARGV[20] * 2 ~= #values then
    refuse('ARGV[20] has not 4 bytes per value of ARGV[21], its length', #ARGV[20])
  end
  for j = 1, #values / 8 do
    if struct.unpack('<i8', values, 8 * j - 7) < 0 then refuse('ARGV[21] budget count below 0', j) end
    if not b.whole then
      local at = struct.unpack('<I4', ARGV[20], 4 * j - 3)
      if at >= size then refuse('ARGV[20] budget slot past the counts', at) end
      b.slots[#b.slots + 1], b.slots[#b.slots + 2] = 8 * at, string.sub(values, 8 * j - 7, 8 * j)
    end
  end
  -- Kept as text for Redis: Lua would write a number of more than 14 digits rounded.
  local marks, texts = {}, {}
  for mark in string.gmatch(ARGV[23], '%S+') do
    marks[#marks + 1], texts[#texts + 1] = whole('ARGV[23] budget mark', mark, 0), mark
  end
  if #marks ~= 4 then refuse('ARGV[23] has not 4 marks but', #marks) end
  b.lowest, b.cut_zero, b.cut_all, b.texts = marks[1], marks[3], marks[4], texts
  if b.cut_all > b.cut_zero then refuse('ARGV[23] cutoff of all past that of zero weights', b.cut_all) end
  if #ARGV[25] ~= #entering then refuse('ARGV[25] has not one step per id entering', #ARGV[25]) end
  for j = 1, #entering / 8 do
    local step = string.format('%.17g', struct.unpack('<d', ARGV[25], 8 * j - 7))
    whole('ARGV[25] last step', step, 1)
    b.scored[2 * j - 1] = step
    b.scored[2 * j] = string.sub(entering, 8 * j - 7, 8 * j)
  end
  return b
end

-- Every argument and every stored value the commit computes from, checked before its first
-- write (checks.lua): a commit is applied whole or not at all. A stored value that is not what
-- finalize writes (a model imported with a log-loss sum of NaN, say) is 'damaged', and no
-- commit can change the model until it is mended; a bad argument is the learner's, 'refused'.
local function check_arguments()
  if #ARGV < 28 then refuse('too few arguments', #ARGV) end
  local a = {
    t = whole('ARGV[2] expected t', ARGV[2], 0),
    examples = whole('ARGV[4] examples learned', ARGV[4], 0),
    logloss = finite('ARGV[5] log-loss sum', ARGV[5]),
    excess = finite('ARGV[15] weight excess', ARGV[15]),
    stable = whole('ARGV[10] change of nnz_stable', ARGV[10]),
    tracked = whole('ARGV[11] change of tracked', ARGV[11]),
    through = whole('ARGV[12] last applied commit', ARGV[12], 0),
    expired = whole('ARGV[19] features expired', ARGV[19], 0),
    leaving = records_of('ARGV[7] ids leaving the expiry set', ARGV[7], 8),
    entering = records_of('ARGV[8] ids entering the expiry set', ARGV[8], 8),
    entries = {}, reasons = {}, fields = {}, scored = {},
  }
  if #ARGV[9] ~= #ARGV[8] then refuse('ARGV[9] has not one step per id entering', #ARGV[9]) end
  for id in string.gmatch(ARGV[6], '%S+') do
    if not string.find(id, '^%d+%-%d+$') then refuse('ARGV[6] has a bad stream entry id', id) end
    a.entries[#a.entries + 1] = id
    a.reasons[#a.reasons + 1] = id .. ':why'
  end
  for j = 1, #a.entering / 8 do
    -- Steps are whole numbers below 2^53; '%.17g' writes them exactly.
    local step = string.format('%.17g', struct.unpack('<d', ARGV[9], 8 * j - 7))
    finite('ARGV[9] expiry step', step)
    a.scored[2 * j - 1] = step
    a.scored[2 * j] = string.sub(a.entering, 8 * j - 7, 8 * j)
  end
  a.counters = admission_counters(ARGV[16], ARGV[17], ARGV[18])
  a.budget = budget_arguments(a.entering)
  a.tally = admission_tally(ARGV[26], tonumber(ARGV[18]))
  a.base = base_rate(ARGV[27])
  a.sums = {}
  for sum in string.gmatch(ARGV[28], '%S+') do
    if finite('ARGV[28] weighted sum', sum) < 0 then refuse('ARGV[28] weighted sum below 0', sum) end
    a.sums[#a.sums + 1] = sum
  end
  if #a.sums ~= 4 then refuse('ARGV[28] has not 4 sums but', #a.sums) end
  if (#ARGV - 28) % 2 ~= 0 then refuse('ARGV[29..] are not pairs, their count is', #ARGV - 28) end
  for i = 29, #ARGV, 2 do
    if not string.find(ARGV[i], '^s%d+$') then refuse('ARGV[' .. i .. '] redo field', ARGV[i]) end
    a.fields[#a.fields + 1], a.fields[#a.fields + 2] = ARGV[i], ARGV[i + 1]
  end
  return a
end

-- The meta's counters as finalize writes them, the keys' types, and the redo log's last
-- entry (the commit's own must come after it).
local function check_stored(a)
  kind(meta, 'hash')
  kind(stream, 'stream')
  kind(expiry, 'zset')
  kind(failures, 'hash')
  kind(redo, 'stream')
  kind(KEYS[7], 'hash')
  kind(KEYS[8], 'string')
  kind(KEYS[9], 'string')
  kind(KEYS[10], 'zset')
  local m = redis.call(
    'HMGET', meta, 't', 'seq', 'logloss_sum', 'nnz_stable', 'tracked', 'weight_excess',
    'expired', 'evicted', 'budget_lowest', 'cut_zero', 'cut_all', 'predicted_sum', 'label_sum')
  local s = {
    t = whole('meta field t', m[1] or '0', 0),
    seq = whole('meta field seq', m[2] or '0', 0),
    logloss = finite('meta field logloss_sum', m[3] or '0'),
    stable = whole('meta field nnz_stable', m[4] or '0'),
    tracked = whole('meta field tracked', m[5] or '0'),
    excess = finite('meta field weight_excess', m[6] or '0'),
    expired = whole('meta field expired', m[7] or '0', 0),
    predicted = finite('meta field predicted_sum', m[12] or '0'),
    labels = finite('meta field label_sum', m[13] or '0'),
  }
  finite('predicted sum after the commit', string.format('%.17g', s.predicted + a.sums[1]))
  finite('label sum after the commit', string.format('%.17g', s.labels + a.sums[2]))
  finite('log-loss sum after the commit', string.format('%.17g', s.logloss + a.logloss))
  finite('weight excess after the commit', string.format('%.17g', s.excess + a.excess))
  local t_after = whole('t after the commit', string.format('%d', s.t + a.examples), 0)
  whole('meta field evicted', m[8] or '0', 0)
  local b = a.budget
  if b then
    local length = redis.call('STRLEN', KEYS[9])
    if length ~= 0 and length ~= 8 * b.size then
      refuse('budget counts are not ARGV[22] slots of 8 bytes but bytes', length)
    end
    local names = {'budget_lowest', 'cut_zero', 'cut_all'}
    local new = {b.lowest, b.cut_zero, b.cut_all}
    for j = 1, 3 do
      local old = whole('meta field ' .. names[j], m[8 + j] or '0', 0)
      if new[j] < old then refuse('ARGV[23] moves ' .. names[j] .. ' back from ' .. old, new[j]) end
    end
    if b.cut_zero > t_after then refuse('ARGV[23] cutoff past the commit\'s end', b.cut_zero) end
    s.cut_all = whole('meta field cut_all', m[11] or '0', 0)
  end
  local last = redis.call('XREVRANGE', redo, '+', '-', 'COUNT', 1)[1]
  if last and tonumber(string.match(last[1], '^%d+')) > s.seq then
    refuse('redo log has entry ' .. last[1] .. ' past meta field seq', s.seq)
  end
  if a.through ~= 0 then s.trim = trim_inputs(KEYS[6], meta) end
  return s
end

local state = redis.call('HMGET', meta, 'fence', 't', 'epoch')
if (state[1] or '0') ~= ARGV[1] then return {'fenced', state[1] or '0'} end
local a, refused = checked('finalize', check_arguments)
if refused then return {'refused', refused} end
local s, damaged = checked('finalize', check_stored, a)
if damaged then return {'damaged', damaged} end
local t = s.t
if t ~= a.t or (state[3] or '') ~= ARGV[3] then
  return {'conflict', tostring(t)}
end

if a.through ~= 0 then trim_redo(redo, KEYS[6], meta, a.through, s.trim) end
local seq = redis.call('HINCRBY', meta, 'seq', 1)
if #a.fields > 0 then
  -- With the entry, each of its shards' previous commit: once that one is trimmed from the
  -- redo log, the shard must hold it before this entry is replayed (workers/rollback.py).
  local prior, touched = {}, {}
  for first = 1, #a.fields, 2000 do
    local names = {}
    for i = first, math.min(first + 1999, #a.fields), 2 do names[#names + 1] = a.fields[i] end
    local before = redis.call('HMGET', KEYS[7], unpack(names))
    for j, name in ipairs(names) do prior[#prior + 1] = name .. ':' .. (before[j] or '0') end
  end
  a.fields[#a.fields + 1], a.fields[#a.fields + 2] = 'prior', table.concat(prior, ' ')
  redis.call('XADD', redo, seq .. '-1', unpack(a.fields))
  for i = 1, #a.fields - 2, 2 do touched[i], touched[i + 1] = a.fields[i], seq end
  each_chunk(touched, 1000, 'HSET', KEYS[7])
end

local leaving = a.leaving
local members = {}
for j = 1, #leaving / 8 do members[j] = string.sub(leaving, 8 * j - 7, 8 * j) end
each_chunk(members, 1000, 'ZREM', expiry)
each_chunk(a.scored, 1000, 'ZADD', expiry)
local b = a.budget
if b then
  -- The nonzero weights of the bins it evicted leave the expiry set (their last step is at
  -- most the new cutoff of all; the stable ones left the count with their bins' counts).
  each_chunk(members, 1000, 'ZREM', KEYS[10])
  each_chunk(b.scored, 1000, 'ZADD', KEYS[10])
  if b.cut_all > s.cut_all then
    local evicted = redis.call('ZRANGEBYSCORE', KEYS[10], '-inf', b.texts[4])
    each_chunk(evicted, 1000, 'ZREM', expiry)
    each_chunk(evicted, 1000, 'ZREM', KEYS[10])
  end
  if b.whole then
    redis.call('SET', KEYS[9], b.whole)
  else
    if #b.slots > 0 and redis.call('STRLEN', KEYS[9]) == 0 then
      redis.call('SET', KEYS[9], string.rep('\0', 8 * b.size))
    end
    for j = 1, #b.slots, 2 do redis.call('SETRANGE', KEYS[9], b.slots[j], b.slots[j + 1]) end
  end
  redis.call('HSET', meta, 'budget_lowest', b.texts[1], 'held', b.texts[2], 'cut_zero', b.texts[3],
    'cut_all', b.texts[4])
  if b.evicted ~= 0 then redis.call('HINCRBY', meta, 'evicted', b.evicted) end
end

local new_t = t + tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', expiry, '-inf', string.format('%.17g', new_t))
redis.call('HSET', meta, 't', string.format('%.17g', new_t))
if type(a.counters) == 'string' then
  redis.call('SET', KEYS[8], a.counters)
else
  each_chunk(a.counters, 1500, 'BITFIELD', KEYS[8])
end
if a.tally then
  redis.call('HSET', meta, 'counters_used', a.tally.used, 'admitted_recent', a.tally.recent)
end
if a.base then
  redis.call('HSET', meta, 'base_clicks', a.base[1], 'base_examples', a.base[2])
end
if ARGV[13] ~= '' then
  redis.call('HSET', meta, 'calibration_fit', ARGV[13], 'calibration_histogram', ARGV[14])
end
local logloss = redis.call('HINCRBYFLOAT', meta, 'logloss_sum', ARGV[5])
if a.excess ~= 0 then redis.call('HINCRBYFLOAT', meta, 'weight_excess', ARGV[15]) end
redis.call('HINCRBYFLOAT', meta, 'predicted_sum', a.sums[1])
redis.call('HINCRBYFLOAT', meta, 'label_sum', a.sums[2])
redis.call('HSET', meta, 'recent_predicted', a.sums[3], 'recent_labels', a.sums[4])
if a.expired ~= 0 then redis.call('HINCRBY', meta, 'expired', ARGV[19]) end
local stable = redis.call('HINCRBY', meta, 'nnz_stable', ARGV[10])
local tracked = redis.call('HINCRBY', meta, 'tracked', ARGV[11])
each_chunk(a.entries, 1000, 'XDEL', stream)
each_chunk(a.entries, 1000, 'HDEL', failures)
each_chunk(a.reasons, 1000, 'HDEL', failures)
return {'ok', seq, string.format('%.17g', new_t), stable + redis.call('ZCARD', expiry),
  tracked, logloss}
