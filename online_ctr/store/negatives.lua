-- What a logged impression becomes as a non-click, under its model's negative rate
-- (online_ctr/learning/sampling.py): its field 'w', set when it was logged, is the weight it
-- carries as a negative, 8 bytes of f64; 0 means the non-click is sampled out (dropped). An
-- impression without 'w' (rate 1, or logged before rates existed) is learned as it is.

-- Whether the impression's 'w' field is absent, or 8 bytes of a finite weight >= 0 beside
-- an entry ``b`` long enough to hold its flags byte (nil: not read here, it is checked apart).
local function negative_weight_ok(w, b)
  if not w then return true end
  if #w ~= 8 or (b and #b < 11) then return false end
  local value = struct.unpack('<d', w)
  return value >= 0 and value < math.huge
end

-- The stream entry of impression entry ``b`` (label byte 0) as a non-click of weight ``w``;
-- nil if it is dropped. The entry becomes version 2 (the first byte) with the weights flag
-- (bit 2 of the flags byte, the 10th), its one weight after everything else (see codec.py).
local function negative_entry(b, w)
  if not w then return b end
  if struct.unpack('<d', w) == 0 then return nil end
  local flags = bit.bor(string.byte(b, 10), 2)
  return '\2' .. string.sub(b, 2, 9) .. string.char(flags) .. string.sub(b, 11) .. w
end
