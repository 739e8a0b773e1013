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

local function contains(list, item)
    for _, value in ipairs(list) do
        if value == item then return true end
    end
    return false
end

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
            g = cjson.decode(raw)
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
    local group = cjson.decode(raw).group
    if type(group) == 'string' then
        local graw = redis.call('HGET', KEYS[2], group)
        if graw then
            local g = cjson.decode(graw)
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
    local g = cjson.decode(raw)
    local split = cjson.decode(ARGV[4])
    if not contains(g.models, serving) then return {'not_member', serving} end
    for member, _ in pairs(split) do
        if not contains(g.models, member) then return {'not_member', member} end
    end
    g.serving = serving
    g.split = split
    redis.call('HSET', KEYS[2], group, cjson.encode(g))
    return {'served', cjson.encode(g)}
end
return redis.error_reply('unknown registry operation ' .. tostring(op))
