-- Forget redo entries up to commit ARGV[1] (every shard has applied them), except those a
-- snapshot export still needs (trim_redo, from pins.lua). KEYS: 1 redo, 2 pins, 3 meta.
-- Every input is checked first (checks.lua): a bad one is refused and nothing is written.
local inputs, problem = checked('trim', function()
  kind(KEYS[1], 'stream')
  kind(KEYS[3], 'hash')
  local through = whole('ARGV[1] last applied commit', ARGV[1], 0)
  local trim = trim_inputs(KEYS[2], KEYS[3])
  trim.through = through
  return trim
end)
if problem then return redis.error_reply(problem) end
trim_redo(KEYS[1], KEYS[2], KEYS[3], inputs.through, inputs)
return 1
