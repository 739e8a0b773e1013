-- The API keys stored while the service runs: add one (within the limit), revoke one, or
-- record when keys were last used. Every change moves the version the API processes poll.
-- KEYS: 1 records (hash: id -> JSON record), 2 used (hash: id -> Unix seconds), 3 version.
-- ARGV: 1 the operation, then
--   'add':    2 id, 3 record (JSON object), 4 the most keys stored (OCTR_MAX_API_KEYS);
--   'revoke': 2 id;
--   'touch':  2 now (Unix seconds), 3 how many of the ids are static (environment or file:
--             recorded whatever the records hold), 4... ids; a stored id is recorded only if
--             it is still stored, so a revoked key leaves no field behind.
-- Returns {'added', version}, {'exists'}, {'full', stored}, {'revoked', version},
-- {'unknown'} or {'touched', n}.
local records, used, version = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]

local function key_id(what, value)
  if type(value) ~= 'string' or not string.find(value, '^%x+$') or #value ~= 16 then
    refuse(what .. ' is not 16 hex digits', value)
  end
  return value
end

local inputs, problem = checked('api_keys', function()
  kind(records, 'hash')
  kind(used, 'hash')
  kind(version, 'string')
  whole('version', redis.call('GET', version) or '0', 0)
  if op == 'add' then
    key_id('ARGV[2] id', ARGV[2])
    json_object('ARGV[3] record', ARGV[3])
    return {limit = whole('ARGV[4] limit', ARGV[4], 1)}
  elseif op == 'revoke' then
    key_id('ARGV[2] id', ARGV[2])
    return {}
  elseif op == 'touch' then
    local static = whole('ARGV[3] static ids', ARGV[3], 0, #ARGV - 3)
    whole('ARGV[2] now', ARGV[2], 0)
    for i = 4, #ARGV do key_id('ARGV[' .. i .. '] id', ARGV[i]) end
    return {static = static}
  end
  refuse('ARGV[1] is not add, revoke or touch', op)
end)
if problem then return redis.error_reply(problem) end

if op == 'add' then
  if redis.call('HEXISTS', records, ARGV[2]) == 1 then return {'exists'} end
  local stored = redis.call('HLEN', records)
  if stored >= inputs.limit then return {'full', stored} end
  redis.call('HSET', records, ARGV[2], ARGV[3])
  return {'added', redis.call('INCR', version)}
elseif op == 'revoke' then
  if redis.call('HDEL', records, ARGV[2]) == 0 then return {'unknown'} end
  redis.call('HDEL', used, ARGV[2])
  return {'revoked', redis.call('INCR', version)}
end
local touched = 0
for i = 4, #ARGV do
  if i - 3 <= inputs.static or redis.call('HEXISTS', records, ARGV[i]) == 1 then
    redis.call('HSET', used, ARGV[i], ARGV[2])
    touched = touched + 1
  end
end
return {'touched', touched}
