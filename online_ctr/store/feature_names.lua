-- Record feature names by id, at most ARGV[1] of them: a name already recorded stays (the
-- first name of an id is kept, as with hash collisions), and past the limit new names are
-- refused, never evicted (docs/limits.md). KEYS: 1 the model's names hash, 2 its meta (a
-- model deleted meanwhile gets no record: nothing would delete it). ARGV: 1 the limit, 2 the
-- ids (8 bytes each, little-endian: the hash's field names), 3 the names' lengths (2 bytes
-- each, little-endian), 4 the names back to back. Three strings rather than two arguments a
-- name: the client's encoding of each argument was most of the cost.
-- Returns {recorded, refused, held}; held is -1 if the model is gone.
local inputs, problem = checked('feature_names', function()
  kind(KEYS[1], 'hash')
  local most = whole('ARGV[1] most names', ARGV[1], 1)
  local count = #ARGV[2] / 8
  if count ~= math.floor(count) or #ARGV[3] ~= 2 * count then
    refuse('ARGV[2] ids and ARGV[3] lengths do not match', #ARGV[2] .. ' ' .. #ARGV[3])
  end
  local total = 0
  for i = 1, count do total = total + struct.unpack('<I2', ARGV[3], 2 * i - 1) end
  if total ~= #ARGV[4] then refuse('ARGV[4] names are not the lengths given', #ARGV[4]) end
  return {most = most, count = count}
end)
if problem then return redis.error_reply(problem) end
if redis.call('EXISTS', KEYS[2]) == 0 then return {0, 0, -1} end
local ids, lengths, names = ARGV[2], ARGV[3], ARGV[4]
local held = redis.call('HLEN', KEYS[1])
local recorded, refused, at = 0, 0, 1
for i = 1, inputs.count do
  local id = string.sub(ids, 8 * i - 7, 8 * i)
  local length = struct.unpack('<I2', lengths, 2 * i - 1)
  if held < inputs.most then
    local added = redis.call('HSETNX', KEYS[1], id, string.sub(names, at, at + length - 1))
    held = held + added
    recorded = recorded + added
  elseif redis.call('HEXISTS', KEYS[1], id) == 0 then
    refused = refused + 1
  end
  at = at + length
end
return {recorded, refused, held}
