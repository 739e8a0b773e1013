-- Move the model's log generation on (workers/rollback.py): the learner found its state
-- shards ahead of the log (the log side went back, a failover to a lagging replica), so new
-- commits, which reuse numbers the shards have, are stamped with a new generation and the
-- shards apply them (apply.lua). The report says what was found, for /readyz.
-- KEYS: 1 meta. ARGV: 1 the learner's fence token, 2 the commit number the learner found the
-- log at, 3 the new generation (above the meta's), 4 the report (not empty).
-- Returns {'ok'}; or, having written nothing, {'fenced', token} (the lease moved) or
-- {'moved', seq} (the log is no longer where the learner found it).
-- Every argument and stored value is checked first (checks.lua).
local meta = KEYS[1]
local c, problem = checked('generation', function()
  kind(meta, 'hash')
  local stored = redis.call('HMGET', meta, 'fence', 'seq', 'gen')
  local s = {
    fence = stored[1] or '0',
    seq = whole('meta field seq', stored[2] or '0', 0),
    gen = whole('meta field gen', stored[3] or '0', 0),
    expected = whole('ARGV[2] commit', ARGV[2], 0),
    new = whole('ARGV[3] generation', ARGV[3], 1),
  }
  whole('meta field fence', s.fence, 0)
  if s.new <= s.gen then refuse('ARGV[3] generation is not above the stored one', ARGV[3]) end
  if ARGV[4] == nil or ARGV[4] == '' then refuse('ARGV[4] report is empty', '') end
  return s
end)
if problem then return redis.error_reply(problem) end
if c.fence ~= ARGV[1] then return {'fenced', c.fence} end
if c.seq ~= c.expected then return {'moved', tostring(c.seq)} end
redis.call('HSET', meta, 'gen', ARGV[3], 'rollback', ARGV[4])
return {'ok'}
