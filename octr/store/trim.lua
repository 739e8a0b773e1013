-- Forget redo entries up to commit ARGV[1] (every shard has applied them), except those a
-- snapshot export still needs (trim_redo, from pins.lua). KEYS: 1 redo, 2 pins, 3 meta.
trim_redo(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[1]))
return 1
