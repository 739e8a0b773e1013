-- Checks of a script's inputs, made before its first write: Redis never rolls a script back,
-- so a script that failed half-way would leave the writes it had made (a commit's step moved
-- and its redo entry added, then its log-loss sum refused: each retry applied it again).
-- Each check returns the value it parsed or raises the refusal, a message naming the input;
-- a script runs its checks through checked() and answers the message before writing anything.

local function refuse(what, value)
  error(what .. ': ' .. tostring(value), 0)
end

-- A whole number written in decimal ('-12'), within [low, high] (by default +-2^53, where
-- a Lua number, a double, still holds every whole number: steps and counters stay below).
local function whole(what, value, low, high)
  if type(value) ~= 'string' or not string.find(value, '^%-?%d+$') then
    refuse(what .. ' is not a whole number', value)
  end
  local number = tonumber(value)
  if number < (low or -9007199254740992) or number > (high or 9007199254740992) then
    refuse(what .. ' is out of range', value)
  end
  return number
end

-- A finite number as Redis's HINCRBYFLOAT and ZADD read one (no spaces, no nan or inf).
local function finite(what, value)
  local number = type(value) == 'string' and not string.find(value, '%s') and tonumber(value)
  if not number or number ~= number or number == math.huge or number == -math.huge then
    refuse(what .. ' is not a finite number', value)
  end
  return number
end

-- A byte string of whole records of 'size' bytes.
local function records_of(what, value, size)
  if type(value) ~= 'string' or #value % size ~= 0 then
    refuse(what .. ' is not whole records of ' .. size .. ' bytes, its length is', #tostring(value))
  end
  return value
end

-- A JSON object (a Lua table), decoded: cjson.decode raises a bare Lua error otherwise.
local function json_object(what, raw)
  local ok, value = pcall(cjson.decode, raw)
  if not ok or type(value) ~= 'table' then refuse(what .. ' is no JSON object', raw) end
  return value
end

-- A key that is absent or of the type the script's commands need.
local function kind(key, expected)
  local found = redis.call('TYPE', key).ok
  if found ~= 'none' and found ~= expected then
    refuse('key ' .. key .. ' is a ' .. found .. ', not a', expected)
  end
end

-- Run check(...): its results, or nil and the refusal prefixed with the script's name (an
-- error raised by a command in the check, such as WRONGTYPE, is a refusal too).
local function checked(script, check, ...)
  local result = {pcall(check, ...)}
  if result[1] then return unpack(result, 2) end
  local problem = result[2]
  if type(problem) == 'table' then problem = problem.err end
  return nil, script .. ': ' .. tostring(problem)
end

-- A commit's stamp, as apply.lua names a commit and writes a shard's 'applied': its number, then
-- a space and the log generation it was committed in when that is not 0 ('548 2'; '548' is
-- generation 0, what every stamp was before generations). The generation moves on when the log
-- side is found to have gone back (workers/rollback.py), so that a reused number is not taken
-- for the commit of that number a shard already has. Returns the number and the generation.
-- One match and no other call for the usual plain number: apply.lua reads one per shard.
local function stamp(what, value, low)
  local seq, gen
  if type(value) == 'string' then seq, gen = string.match(value, '^(%d+)( ?%d*)$') end
  if not seq or gen == ' ' then refuse(what .. ' is not a commit stamp', tostring(value)) end
  seq = tonumber(seq)
  gen = gen == '' and 0 or tonumber(string.sub(gen, 2))
  if seq < low or seq > 9007199254740992 or gen > 9007199254740992 then
    refuse(what .. ' is out of range', value)
  end
  return seq, gen
end
