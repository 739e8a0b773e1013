-- Move a stream entry to the dead-letter stream with its reason, if the caller still holds
-- the learner's fence token (a learner that lost its lease must not drop what the new one
-- is about to learn).
-- KEYS: 1 meta, 2 stream, 3 dead, 4 failures. ARGV: 1 fence, 2 entry id, 3 reason.
-- The id and the keys' types are checked first (checks.lua).
-- Returns 1 if moved, 0 if fenced or already gone.
local _, problem = checked('dead_letter', function()
  if not string.find(ARGV[2], '^%d+%-%d+$') then refuse('ARGV[2] is no stream entry id', ARGV[2]) end
  if ARGV[3] == nil then refuse('no ARGV[3] reason', '') end
  kind(KEYS[2], 'stream')
  kind(KEYS[3], 'stream')
  kind(KEYS[4], 'hash')
  return true
end)
if problem then return redis.error_reply(problem) end
if (redis.call('HGET', KEYS[1], 'fence') or '0') ~= ARGV[1] then return 0 end
local entry = redis.call('XRANGE', KEYS[2], ARGV[2], ARGV[2])
if #entry == 0 then return 0 end
local fields = entry[1][2]
fields[#fields + 1] = 'entry'
fields[#fields + 1] = ARGV[2]
fields[#fields + 1] = 'reason'
fields[#fields + 1] = ARGV[3]
redis.call('XADD', KEYS[3], '*', unpack(fields))
redis.call('XDEL', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2], ARGV[2] .. ':why')
return 1
