-- Claim a model name for an import: refuse an existing model (or one being imported) unless
-- ARGV[2] is 'replace', else delete the model's log side and mark its meta as importing, so
-- that nobody creates, serves or learns the model until finish.lua (ModelStore.ensure
-- refuses a meta marked importing). The fence moves on: a learner of the old model is
-- refused at its next commit.
-- KEYS: 1 meta, then the other log-side keys to delete. ARGV: 1 the import's token, 2
-- 'replace' or ''. Returns {'ok', old seq, old shards, existed (0/1)}, {'exists'} or
-- {'importing'}.
-- The arguments, the meta's fence and the keys' types are checked first (checks.lua).
local _, problem = checked('claim', function()
  if ARGV[1] == nil or ARGV[1] == '' then refuse('ARGV[1] import token is empty', '') end
  if ARGV[2] ~= 'replace' and ARGV[2] ~= '' then refuse('ARGV[2] is neither replace nor empty', ARGV[2]) end
  kind(KEYS[1], 'hash')
  whole('meta field fence', redis.call('HGET', KEYS[1], 'fence') or '0', 0)
  return true
end)
if problem then return redis.error_reply(problem) end
local meta = KEYS[1]
local state = redis.call('HMGET', meta, 'epoch', 'importing', 'seq', 'shards')
if ARGV[2] ~= 'replace' then
  if state[2] then return {'importing'} end
  if state[1] then return {'exists'} end
end
local existed = (state[1] or state[2]) and 1 or 0
local fence = redis.call('HINCRBY', meta, 'fence', 1)
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('DEL', meta)
redis.call('HSET', meta, 'fence', fence, 'importing', ARGV[1])
return {'ok', state[3] or '0', state[4] or '0', existed}
