-- Take over entries idle too long in any consumer's hands, and if any were taken, bump the
-- model's claims counter in the same step: commits compare it to skip per-entry owner checks.
-- KEYS: 1 stream, 2 meta. ARGV: 1 group, 2 consumer, 3 min idle (ms), 4 count.
-- Returns {claims, entries}: the counter after this call and the claimed entries.
local reply = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], '0-0', 'COUNT', ARGV[4])
local claims
if #reply[2] > 0 then
  claims = redis.call('HINCRBY', KEYS[2], 'claims', 1)
else
  claims = redis.call('HGET', KEYS[2], 'claims') or '0'
end
return {tostring(claims), reply[2]}
