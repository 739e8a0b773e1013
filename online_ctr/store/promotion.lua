-- A group's promotion policy and its running test, changed atomically (the registry's slot).
-- KEYS[1] groups: name -> the group record (registry.lua), whose 'promotion' holds the policy
-- KEYS[2] tallies: group -> the promoter's state (JSON: the champion, cursors and tallies)
-- KEYS[3] promotions: a stream of every promotion made, at most ARGV[#ARGV] entries (about)
-- ARGV[1] the operation, then its arguments:
--   policy GROUP POLICY(JSON object, '' for none)          -> {'set', group record}
--   tally GROUP EXPECTED NEW                                -> {'tallied', ''} | {'moved', state}
--   promote GROUP FROM TO EXPECTED NEW FIELDS(JSON object)  -> {'promoted', group record}
--                                                            | {'moved', state} | {'serving', s}
-- The last argument of tally and promote is the most promotions kept.
-- tally and promote write only if the stored state is still EXPECTED (compare and set): a
-- promoter that lost the serving model's lease a moment ago cannot overwrite its successor's.
-- Every argument, the keys' types and the group record are checked before the first write.
local op = ARGV[1]

local function stored_group(group)
  local raw = redis.call('HGET', KEYS[1], group)
  if not raw then return nil end
  return group_record(group, raw)
end

-- The policy as PolicyBody reads it back (model_config.py): counts whole and at most 1e12,
-- which cjson writes exactly (it keeps 14 significant digits).
local function check_policy(raw)
  local p = json_object('ARGV[3] policy', raw)
  local function number(field, low, high, whole_only)
    local v = p[field]
    if type(v) ~= 'number' or v ~= v or v < low or v >= high or (whole_only and v % 1 ~= 0) then
      refuse('ARGV[3] policy ' .. field .. ' is not a number in [' .. low .. ', ' .. high .. ')', raw)
    end
  end
  number('margin', 0, 1)
  number('confidence', 0.5, 1)
  number('min_examples', 1, 1e12 + 1, true)
  number('planned_units', 1, 1e12 + 1, true)
  return p
end

local function check()
  kind(KEYS[1], 'hash')
  kind(KEYS[2], 'hash')
  kind(KEYS[3], 'stream')
  local a = {}
  if type(ARGV[2]) ~= 'string' or ARGV[2] == '' then refuse('ARGV[2] group is empty', ARGV[2]) end
  a.group = stored_group(ARGV[2])
  if op == 'policy' then
    if #ARGV ~= 3 then refuse('policy takes 2 arguments, not', #ARGV - 1) end
    if ARGV[3] ~= '' then a.policy = check_policy(ARGV[3]) end
  elseif op == 'tally' then
    if #ARGV ~= 5 then refuse('tally takes 4 arguments, not', #ARGV - 1) end
    json_object('ARGV[4] new state', ARGV[4])
    whole('ARGV[5] most promotions', ARGV[5], 1)
  elseif op == 'promote' then
    if #ARGV ~= 8 then refuse('promote takes 7 arguments, not', #ARGV - 1) end
    json_object('ARGV[6] new state', ARGV[6])
    local fields = json_object('ARGV[7] fields', ARGV[7])
    a.fields = {}
    for field, value in pairs(fields) do
      if type(value) ~= 'string' and type(value) ~= 'number' then
        refuse('ARGV[7] field ' .. tostring(field) .. ' is no string or number', ARGV[7])
      end
      table.insert(a.fields, field)
      table.insert(a.fields, tostring(value))
    end
    whole('ARGV[8] most promotions', ARGV[8], 1)
  else
    refuse('unknown promotion operation', op)
  end
  return a
end
local a, problem = checked('promotion', check)
if problem then return redis.error_reply(problem) end

local group = ARGV[2]
if not a.group then return {'unknown', group} end
local g = a.group
if op == 'policy' then
  g.promotion = a.policy  -- nil removes it
  redis.call('HSET', KEYS[1], group, cjson.encode(g))
  redis.call('HDEL', KEYS[2], group)  -- a new policy tests afresh
  return {'set', cjson.encode(g)}
end
local stored = redis.call('HGET', KEYS[2], group) or ''
if stored ~= ARGV[3] then return {'moved', stored} end
if op == 'tally' then
  redis.call('HSET', KEYS[2], group, ARGV[4])
  return {'tallied', ''}
end
local from, to = ARGV[4], ARGV[5]
if g.serving ~= from then return {'serving', g.serving} end
if not contains(g.models, to) then return {'serving', g.serving} end
g.serving = to
-- A traffic split keeps its shares: the promoted model takes the one the champion had.
local share_from, share_to = g.split[from], g.split[to]
g.split[from], g.split[to] = share_to, share_from
redis.call('HSET', KEYS[1], group, cjson.encode(g))
redis.call('HSET', KEYS[2], group, ARGV[6])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[8], '*', 'group', group, unpack(a.fields))
return {'promoted', cjson.encode(g)}
