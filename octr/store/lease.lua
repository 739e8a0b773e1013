-- The one learner of a model: take, keep or give up the lease, fenced by a token.
-- KEYS: 1 meta, 2 lease. ARGV: 1 holder name, 2 TTL (ms), 3 the holder's fence token, or ''
-- to take a free lease, 4 'release' to give it up.
-- Taking a free lease bumps meta's 'fence': every commit names the token it was computed
-- under and is refused once the token has moved, so a learner that lost its lease (stalled,
-- partitioned) can never commit again. Keeping it needs the token to be unchanged; an expired
-- lease that nobody took is simply renewed.
-- Returns {'held', token}, {'busy', current lease} or {'lost', current token}.
local meta, lease = KEYS[1], KEYS[2]
local holder, ttl, token = ARGV[1], ARGV[2], ARGV[3]
local fence = redis.call('HGET', meta, 'fence') or '0'
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
