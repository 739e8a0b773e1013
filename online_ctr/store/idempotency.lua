-- Idempotency-Key records of one feedback tag and their index: a sorted set of the keys, each
-- scored by when its record was written (Redis's clock, in microseconds, made strictly
-- increasing: ties, or a clock set back, never reorder who is oldest). append.lua and join.lua write a
-- record and its index entry in the same script, so the two never disagree, and hold the
-- tag to at most 'most' records (OCTR_MAX_IDEMPOTENCY_KEYS): a new record past it drops the
-- oldest first, which shortens their retry window (a retry of a dropped key is appended
-- again). Entries whose records expired are pruned by the same step, so the index is bounded
-- too.

-- Most index entries one call drops: bounds how long Redis is busy with it (a limit lowered
-- by a restart, or a day of entries expired while no key came, is worked off over calls).
local IDEM_MOST_DROPPED = 1000

-- Check the arguments of a keyed call before the first write: the limit (ARGV[6] of both
-- scripts), the record's key, under the records' prefix (ARGV[7]), and the index's type.
-- Returns the limit.
local function idem_checked(record, index, prefix, most)
  local limit = whole('ARGV[6] most records', most, 1)
  if type(prefix) ~= 'string' or prefix == '' or #record <= #prefix
      or string.sub(record, 1, #prefix) ~= prefix then
    refuse('record ' .. record .. ' is not a key under the ARGV[7] prefix', prefix)
  end
  kind(index, 'zset')
  return limit
end

-- Write the record 'value' for window_s seconds and index it, first dropping index entries
-- whose records expired and, past 'most', the oldest records. Returns how many records were
-- dropped before their window ended (a DEL of an expired one removes nothing).
local function idem_record(record, index, prefix, most, window_s, value)
  local time = redis.call('TIME')  -- one clock for every API process
  local now = tonumber(time[1]) * 1000000 + tonumber(time[2])  -- < 2^53: exact in a double
  local cutoff = string.format('(%.0f', now - window_s * 1000000)  -- tostring would round
  local stale = redis.call('ZCOUNT', index, '-inf', cutoff)
  local over = redis.call('ZCARD', index) - most + 1  -- room for the new one
  local drop = math.min(math.max(stale, over), IDEM_MOST_DROPPED)
  local evicted = 0
  if drop > 0 then
    for _, member in ipairs(redis.call('ZRANGE', index, 0, drop - 1)) do
      evicted = evicted + redis.call('DEL', prefix .. member)
    end
    redis.call('ZREMRANGEBYRANK', index, 0, drop - 1)
  end
  local newest = redis.call('ZRANGE', index, -1, -1, 'WITHSCORES')[2]
  if newest and tonumber(newest) >= now then now = tonumber(newest) + 1 end
  redis.call('SET', record, value, 'EX', window_s)
  redis.call('ZADD', index, string.format('%.0f', now), string.sub(record, #prefix + 1))
  return evicted
end
