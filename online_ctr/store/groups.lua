-- What registry.lua and promotion.lua share about the registry's group records.

local function contains(list, item)
  for _, value in ipairs(list) do
    if value == item then return true end
  end
  return false
end

-- A stored group record, checked as every operation on it reads it: a record that does not
-- decode, or lacks its models (each a name), split, serving model or shared settings, is
-- refused before anything is written.
local function group_record(group, raw)
  local g = json_object('group ' .. group, raw)
  if type(g.models) ~= 'table' or type(g.split) ~= 'table' or type(g.serving) ~= 'string'
      or type(g.shared) ~= 'string' then
    refuse('group ' .. group .. ' lacks its models, split, serving model or shared settings', raw)
  end
  for _, member in ipairs(g.models) do
    if type(member) ~= 'string' then refuse('group ' .. group .. ' has a model that is no name', raw) end
  end
  return g
end
