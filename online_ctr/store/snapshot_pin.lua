-- A snapshot export's pin on the redo log (see pins.lua and online_ctr/store/snapshot_export.py).
-- KEYS: 1 meta, 2 redo, 3 pins, 4 expiry, 5 admission counters (optional: an older caller
-- passes four). ARGV: 1 what, 2 the export's token, 3 TTL (ms).
-- 'pin': pin every redo entry still there and every later one; returns {'ok', epoch, first
--   commit whose entry is kept, last commit}, or {'missing'} if there is no model (or one being imported).
-- 'renew': move the deadline on. 'close': renew, and return the model at this instant:
--   {'ok', epoch, seq, t, logloss_sum, nnz_stable, tracked, expiring, weight_excess ('': none),
--   admission counters ('': none), features expired, then a feature budget's marks: its oldest
--   bin kept, features held, features evicted, cutoff of zero weights, cutoff of all ('0'
--   each: no budget), then the admission filter's admissions per halving period, the meta's
--   'admitted_recent' as finalize.lua writes it ('r0 .. r7'; '': none committed, or no
--   filter), then the base rate's counts base_clicks and base_examples ('0' each before a
--   commit), the sums predicted_sum and label_sum ('': none) and recent_predicted and
--   recent_labels ('': none)}, all read at one instant (a caller that reads the first eleven is unaffected by
--   the marks after them, one that reads the first sixteen by the admissions). 'release':
--   drop it.
-- Each but 'pin' returns {'lapsed'} if the pin is gone or past its deadline: entries it
-- needed may have been trimmed, so the export cannot be exact and must fail.
-- The arguments, the stored seq, the export's pin and the keys' types are checked first
-- (checks.lua).
local meta, redo, pins, expiry = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local WHAT = {pin = true, renew = true, close = true, release = true}
local what, token = ARGV[1], ARGV[2]
local ttl, problem = checked('snapshot_pin', function()
  if not WHAT[what] then refuse('ARGV[1] is not pin, renew, close or release', what) end
  local ms = whole('ARGV[3] TTL (ms)', ARGV[3], 1)
  kind(meta, 'hash')
  kind(redo, 'stream')
  kind(pins, 'hash')
  kind(expiry, 'zset')
  if KEYS[5] then kind(KEYS[5], 'string') end
  whole('meta field seq', redis.call('HGET', meta, 'seq') or '0', 0)
  local held = redis.call('HGET', pins, token)
  if held and not string.find(held, '^%d+ %d+$') then
    refuse('pin ' .. token .. ' is not "<seq> <deadline>"', held)
  end
  return ms
end)
if problem then return redis.error_reply(problem) end
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)

if what == 'pin' then
  local state = redis.call('HMGET', meta, 'epoch', 'seq', 'importing')
  if not state[1] or state[3] then return {'missing'} end
  -- Every commit before the first entry still in the log is applied to every shard (entries
  -- are trimmed only once they are); with an empty log, every commit up to seq is.
  local keep = tonumber(state[2] or '0') + 1
  local first = redis.call('XRANGE', redo, '-', '+', 'COUNT', 1)
  if #first > 0 then keep = tonumber(string.match(first[1][1], '^(%d+)')) end
  redis.call('HSET', pins, token, keep .. ' ' .. (now_ms + ttl))
  return {'ok', state[1], tostring(keep), state[2] or '0'}
end

local held = redis.call('HGET', pins, token)
if not held then return {'lapsed'} end
local keep, deadline = string.match(held, '^(%d+) (%d+)$')
if tonumber(deadline) < now_ms then
  redis.call('HDEL', pins, token)
  return {'lapsed'}
end
if what == 'release' then
  redis.call('HDEL', pins, token)
  return {'ok'}
end
redis.call('HSET', pins, token, keep .. ' ' .. (now_ms + ttl))
if what == 'renew' then return {'ok'} end
local m = redis.call('HMGET', meta, 'epoch', 'seq', 't', 'logloss_sum', 'nnz_stable', 'tracked',
  'weight_excess', 'expired', 'budget_lowest', 'held', 'evicted', 'cut_zero', 'cut_all',
  'admitted_recent', 'base_clicks', 'base_examples', 'predicted_sum', 'label_sum',
  'recent_predicted', 'recent_labels')
return {'ok', m[1] or '', m[2] or '0', m[3] or '0', m[4] or '0', m[5] or '0', m[6] or '0',
  redis.call('ZCARD', expiry), m[7] or '', KEYS[5] and redis.call('GET', KEYS[5]) or '',
  m[8] or '0', m[9] or '0', m[10] or '0', m[11] or '0', m[12] or '0', m[13] or '0', m[14] or '',
  m[15] or '0', m[16] or '0', m[17] or '', m[18] or '', m[19] or '', m[20] or ''}
