-- Shared by finalize.lua and trim.lua (prepended when they are registered, after checks.lua):
-- trimming the redo log without removing an entry that a snapshot export in progress still
-- needs. The pins hash holds, per export, '<first seq it needs> <deadline, ms of Redis time>';
-- an export renews its deadline while it works, and a pin past its deadline is dropped here
-- (its export died, or will notice and fail: it can no longer roll forward).
-- The meta's 'trimmed' says up to which commit the log has been trimmed (every shard has those
-- commits): a serving copy behind it has missed changes (online_ctr/store/serve.lua).

-- Read and check what trim_redo works from, before the calling script writes anything: the
-- pins (each as {export, first seq it needs, deadline}) and the meta's 'trimmed'.
local function trim_inputs(pins, meta)
  kind(pins, 'hash')
  local raw, held = redis.call('HGETALL', pins), {}
  for i = 1, #raw, 2 do
    local keep, deadline = string.match(raw[i + 1], '^(%d+) (%d+)$')
    if not keep then refuse('pin ' .. raw[i] .. ' is not "<seq> <deadline>"', raw[i + 1]) end
    held[#held + 1] = {raw[i], tonumber(keep), tonumber(deadline)}
  end
  local trimmed = whole('meta field trimmed', redis.call('HGET', meta, 'trimmed') or '0')
  return {held = held, trimmed = trimmed}
end

-- Trim up to commit 'through', with 'inputs' from trim_inputs (so nothing here can fail).
local function trim_redo(redo, pins, meta, through, inputs)
  if #inputs.held > 0 then
    local now = redis.call('TIME')
    local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
    for _, pin in ipairs(inputs.held) do
      if pin[3] < now_ms then
        redis.call('HDEL', pins, pin[1])
      else
        through = math.min(through, pin[2] - 1)
      end
    end
  end
  if through > 0 then
    redis.call('XTRIM', redo, 'MINID', through + 1)
    if through > inputs.trimmed then
      redis.call('HSET', meta, 'trimmed', through)
    end
  end
end
