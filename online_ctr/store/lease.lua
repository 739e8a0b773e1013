-- The one learner of a model: take, keep or give up the lease, fenced by a token.
-- KEYS: 1 meta, 2 lease. ARGV: 1 holder name, 2 TTL (ms), 3 the holder's fence token, or ''
-- to take a free lease, 4 'release' to give it up.
-- Taking a free lease bumps meta's 'fence': every commit names the token it was computed
-- under and is refused once the token has moved, so a learner that lost its lease (stalled,
-- partitioned) can never commit again. Keeping it needs the token to be unchanged; an expired
-- lease that nobody took is simply renewed.
-- The TTL and the stored fence are checked first (checks.lua): a bad TTL once failed the SET
-- after the fence had moved.
-- Returns {'held', token}, {'busy', current lease} or {'lost', current token}.
local meta, lease = KEYS[1], KEYS[2]
local holder, ttl, token = ARGV[1], ARGV[2], ARGV[3]
local fence, problem = checked('lease', function()
  kind(meta, 'hash')
  kind(lease, 'string')
  whole('ARGV[2] TTL (ms)', ttl, 1)
  if ARGV[4] ~= nil and ARGV[4] ~= '' and ARGV[4] ~= 'release' then
    refuse('ARGV[4] is neither release nor empty', ARGV[4])
  end
  local stored = redis.call('HGET', meta, 'fence') or '0'
  whole('meta field fence', stored, 0)
  return stored
end)
if problem then return redis.error_reply(problem) end
if token ~= '' then
  if fence ~= token then return {'lost', fence} end
  if ARGV[4] == 'release' then
    redis.call('DEL', lease)
  else
    redis.call('SET', lease, token .. ' ' .. holder, 'PX', ttl)
  end
  return {'held', token}
end
local current = redis.call('GET', lease)
if current then return {'busy', current} end
fence = tostring(redis.call('HINCRBY', meta, 'fence', 1))
redis.call('SET', lease, fence .. ' ' .. holder, 'PX', ttl)
return {'held', fence}
