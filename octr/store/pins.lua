-- Shared by finalize.lua and trim.lua (prepended when they are registered): trimming the redo
-- log without removing an entry that a snapshot export in progress still needs.
-- The pins hash holds, per export, '<first seq it needs> <deadline, ms of Redis time>'; an
-- export renews its deadline while it works, and a pin past its deadline is dropped here
-- (its export died, or will notice and fail: it can no longer roll forward).
-- The meta's 'trimmed' says up to which commit the log has been trimmed (every shard has those
-- commits): a serving copy behind it has missed changes (octr/store/serve.lua).
local function trim_redo(redo, pins, meta, through)
  local held = redis.call('HGETALL', pins)
  if #held > 0 then
    local now = redis.call('TIME')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    for i = 1, #held, 2 do
      local keep, deadline = string.match(held[i + 1], '^(%d+) (%d+)$')
      if tonumber(deadline) < now_ms then
        redis.call('HDEL', pins, held[i])
      else
        through = math.min(through, tonumber(keep) - 1)
      end
    end
  end
  if through > 0 then
    redis.call('XTRIM', redo, 'MINID', through + 1)
    if through > tonumber(redis.call('HGET', meta, 'trimmed') or '0') then
      redis.call('HSET', meta, 'trimmed', through)
    end
  end
end
