-- Read for a serving process that keeps a copy of hot features' state (online_ctr/store/replica.py),
-- in one atomic call on a single Redis: the model's epoch, commit number, step and calibration
-- fit, the state of the features the copy lacks, and the records of the commits that bring
-- both up to date. (bucket_key: buckets.lua, read_records: reads.lua, prepended.)
-- KEYS: 1 meta. ARGV: 1 the copy's epoch, 2 the commit it is exact as of,
-- 3 most commits a reply carries, 4 field bytes, 5 value bytes, 6 and 7 what comes before and
-- after a shard's number in its bucket key prefix, 8 what comes after it in its 'applied'
-- key, 9 the records to read (see reads.lua), 10 the redo log (the meta's hash tag). The redo
-- log is named in ARGV, not KEYS, as the buckets are: EVALSHA checks each declared key as
-- written, and the API's Redis user may only read it (online_ctr/store/acl.py).
-- Returns {'ok', epoch, seq, t, fit ('' if none), cut_all (a feature budget's cutoff of all
-- features, '0' if none), base_clicks, base_examples (the base rate's counts, '0' before the
-- first commit), changes, values, present} (epoch: the
-- meta's, with '/' and the log generation when that is not 0): changes are the
-- records (u32 bucket | field | value) of the commits since the copy's, and of the older ones
-- only the records of shards read that had not applied them yet (the features read may lack
-- them), oldest first, back to back.
-- Or {'reset', epoch, seq, t, fit, cut_all, base_clicks, base_examples}, nothing read: another epoch, a commit the copy needs that
-- is no longer in the redo log, or too many: the copy starts again.
local meta =
  redis.call('HMGET', KEYS[1], 'epoch', 'seq', 't', 'calibration_fit', 'trimmed', 'gen', 'cut_all',
    'base_clicks', 'base_examples')
local epoch, seq, known = meta[1] or '', tonumber(meta[2] or '0'), tonumber(ARGV[2])
-- The copy is exact as of a commit of one log generation (checks.lua's stamp): a new one
-- (the log side went back, and numbers are used again) starts the copy again, as an epoch does.
local gen = tonumber(meta[6] or '0')
if epoch ~= '' and gen ~= 0 then epoch = epoch .. '/' .. meta[6] end
-- Every commit up to 'trimmed' is in every shard and gone from the redo log (pins.lua).
local trimmed, most = tonumber(meta[5] or '0'), tonumber(ARGV[3])
local field_bytes, head, records = tonumber(ARGV[4]), ARGV[6], ARGV[9]

local function reply(status, ...)
  return {status, epoch, meta[2] or '0', meta[3] or '0', meta[4] or '', meta[7] or '0',
    meta[8] or '0', meta[9] or '0', ...}
end

if epoch == '' or epoch ~= ARGV[1] or seq < known or trimmed > known then
  return reply('reset')
end
-- A shard holds every commit up to its 'applied' one: the features read need the commits
-- after the lowest of their shards' (still in the log unless every shard has them).
-- 'applied' holds, per shard read (by number), the last commit it has.
local low, record, applied = known, 6 + field_bytes, {}
-- Every commit up to 'trimmed' is in every shard: when that is every commit (a model whose
-- learner is idle trims at once, workers/committer.py), no shard lags, and their 'applied'
-- keys (a GET each, a third of a lone prediction's script time) need not be read.
local lagging = trimmed < seq and #records or 0
for i = 1, lagging / record do
  local shard = struct.unpack('<I2', records, (i - 1) * record + 1)
  if not applied[shard] then
    -- A shard stamped with an earlier generation than the log's is one its learner has not
    -- restamped yet (workers/rollback.py): it has the log's commits up to its own or the
    -- log's last, whichever is lower (no commit of the new generation exists before it is).
    local number, stamped = stamp('shard', redis.call('GET', head .. shard .. ARGV[8]) or '0', 0)
    if stamped < gen then number = math.min(number, seq) end
    applied[shard] = number
    if number < low then low = number end
  end
end
low = math.max(low, trimmed)
local changes = ''
if low < seq then
  local entries = redis.call('XRANGE', ARGV[10], '(' .. low .. '-1', '+', 'COUNT', most + 1)
  if #entries > most then return reply('reset') end
  local blobs = {}
  for _, entry in ipairs(entries) do
    -- The copy has every commit up to its own: of those, only a lagging shard's records
    -- (a redo field of records is named 's' and the shard's number; 'prior', the shards'
    -- commits before it, holds none: finalize.lua).
    local number, fields = tonumber(string.match(entry[1], '^%d+')), entry[2]
    for j = 1, #fields, 2 do
      if string.byte(fields[j], 1) == 115 then  -- 's'
        local lag = number <= known and applied[tonumber(string.sub(fields[j], 2))]
        if number > known or (lag and lag < number) then blobs[#blobs + 1] = fields[j + 1] end
      end
    end
  end
  changes = table.concat(blobs)
end
local values, present = read_records(field_bytes, tonumber(ARGV[5]), head, ARGV[7], records)
return reply('ok', changes, values, present)
