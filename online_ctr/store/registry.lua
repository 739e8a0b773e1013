-- The registry of models and groups, changed atomically (one hash tag, so one slot).
-- KEYS[1] models: name -> the model's configuration (canonical JSON)
-- KEYS[2] groups: name -> {"models": [...], "serving": name, "split": {name: weight},
--                          "shared": what its models must share (canonical JSON, a string)}
-- ARGV[1] the operation, then its arguments:
--   create NAME CONFIG GROUP|'' MOST REPLACE(0/1) SHARED
--   delete NAME
--   serve GROUP SERVING SPLIT(JSON object, {} for none)
-- Returns {outcome, detail}: outcomes other than created/exists/deleted/served are refusals.
local op = ARGV[1]

local function remove(list, item)
    for i = #list, 1, -1 do
        if list[i] == item then table.remove(list, i) end
    end
end

-- Every argument, the keys' types and every stored record the operation reads are checked
-- before its first write (checks.lua, groups.lua): a configuration or a split that is no JSON object, a
-- limit that is no number, a stored group or model record that does not decode (or lacks its
-- models) is refused with nothing written, where cjson.decode or a comparison raised a bare
-- Lua error; a configuration stored here always decodes, since delete reads its group.

local function name(what, value)
  if type(value) ~= 'string' or value == '' then refuse(what .. ' is empty', tostring(value)) end
  return value
end

local function check()
  kind(KEYS[1], 'hash')
  kind(KEYS[2], 'hash')
  local a = {}
  if op == 'create' then
    if #ARGV ~= 7 then refuse('create takes 6 arguments, not', #ARGV - 1) end
    name('ARGV[2] model name', ARGV[2])
    json_object('ARGV[3] configuration', ARGV[3])
    whole('ARGV[5] most models', ARGV[5], 0)
    if ARGV[6] ~= '0' and ARGV[6] ~= '1' then refuse('ARGV[6] replace is neither 0 nor 1', ARGV[6]) end
    json_object('ARGV[7] shared settings', ARGV[7])
    if ARGV[4] ~= '' then
      local raw = redis.call('HGET', KEYS[2], ARGV[4])
      if raw then a.group = group_record(ARGV[4], raw) end
    end
  elseif op == 'delete' then
    if #ARGV ~= 2 then refuse('delete takes 1 argument, not', #ARGV - 1) end
    local raw = redis.call('HGET', KEYS[1], name('ARGV[2] model name', ARGV[2]))
    if raw then
      a.group = json_object('model ' .. ARGV[2], raw).group
      if type(a.group) == 'string' then
        local graw = redis.call('HGET', KEYS[2], a.group)
        if graw then a.record = group_record(a.group, graw) end
      end
    end
  elseif op == 'serve' then
    if #ARGV ~= 4 then refuse('serve takes 3 arguments, not', #ARGV - 1) end
    name('ARGV[2] group name', ARGV[2])
    name('ARGV[3] serving model', ARGV[3])
    a.split = json_object('ARGV[4] split', ARGV[4])
    for member, weight in pairs(a.split) do
      if type(member) ~= 'string' or type(weight) ~= 'number' or weight ~= weight
          or weight < 0 or weight == math.huge then
        refuse('ARGV[4] split has a weight that is no finite number >= 0', ARGV[4])
      end
    end
    local raw = redis.call('HGET', KEYS[2], ARGV[2])
    if raw then a.group = group_record(ARGV[2], raw) end
  else
    refuse('unknown registry operation', op)
  end
  return a
end
local a, problem = checked('registry', check)
if problem then return redis.error_reply(problem) end

if op == 'create' then
    local name, config, group = ARGV[2], ARGV[3], ARGV[4]
    if redis.call('HEXISTS', KEYS[2], name) == 1 then return {'name_is_group', name} end
    local old = redis.call('HGET', KEYS[1], name)
    if old then
        if old == config then return {'exists', old} end
        if ARGV[6] ~= '1' then return {'conflict', old} end
    elseif redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then
        return {'full', ARGV[5]}
    end
    if group ~= '' then
        if redis.call('HEXISTS', KEYS[1], group) == 1 then return {'group_is_model', group} end
        local raw = redis.call('HGET', KEYS[2], group)
        local g
        if raw then
            g = a.group
            if g.shared ~= ARGV[7] then return {'shared_differs', raw} end
        else
            g = {models = {}, serving = name, split = {}, shared = ARGV[7]}
        end
        if not contains(g.models, name) then table.insert(g.models, name) end
        redis.call('HSET', KEYS[2], group, cjson.encode(g))
    end
    redis.call('HSET', KEYS[1], name, config)
    return {'created', config}
elseif op == 'delete' then
    local name = ARGV[2]
    local raw = redis.call('HGET', KEYS[1], name)
    if not raw then return {'unknown', name} end
    local group = a.group
    if type(group) == 'string' then
        local graw = redis.call('HGET', KEYS[2], group)
        if graw then
            local g = a.record
            if g.serving == name and #g.models > 1 then return {'serving', group} end
            remove(g.models, name)
            g.split[name] = nil
            if #g.models == 0 then
                redis.call('HDEL', KEYS[2], group)
            else
                redis.call('HSET', KEYS[2], group, cjson.encode(g))
            end
        end
    end
    redis.call('HDEL', KEYS[1], name)
    return {'deleted', raw}
elseif op == 'serve' then
    local group, serving = ARGV[2], ARGV[3]
    local raw = redis.call('HGET', KEYS[2], group)
    if not raw then return {'unknown', group} end
    local g = a.group
    local split = a.split
    if not contains(g.models, serving) then return {'not_member', serving} end
    for member, _ in pairs(split) do
        if not contains(g.models, member) then return {'not_member', member} end
    end
    g.serving = serving
    g.split = split
    redis.call('HSET', KEYS[2], group, cjson.encode(g))
    return {'served', cjson.encode(g)}
end
