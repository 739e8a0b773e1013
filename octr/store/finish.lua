-- Finish an import: if the import still holds the name (ARGV[1] is its token), describe the
-- model in its meta (pairs of field and value from ARGV[2]) and lift the importing mark;
-- from then on it is an ordinary model. KEYS: 1 meta. Returns 1, or 0 if the name was
-- claimed again or deleted meanwhile.
local meta = KEYS[1]
if redis.call('HGET', meta, 'importing') ~= ARGV[1] then return 0 end
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('HSET', meta, unpack(fields))
redis.call('HDEL', meta, 'importing')
return 1
