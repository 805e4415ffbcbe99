-- tc.utils.from_torch_state_dict(sd): PyTorch checkpoint keys -> tc module names. PyTorch numbers
-- list positions from 0 (Sequential/ModuleList children: "layers.0.weight"); tc's module names
-- count from 1 ("layers.1.weight"). Every dot-separated component made only of digits is
-- incremented; other components and the tensors themselves are left as they are.
-- tc.utils.to_torch_state_dict(sd) is the inverse (for writing files PyTorch code loads).
local tc = require "tc"
local raise = tc._C.raise
local M = {}

local function renamer(delta, what)
  return function(sd)
    if type(sd) ~= "table" then raise("ValueError", what .. "(sd): expected a table of name = tensor, got " .. type(sd)) end
    local out = {}
    for key, t in pairs(sd) do
      if type(key) ~= "string" then raise("ValueError", what .. "(): keys must be strings, got " .. type(key)) end
      local parts = {}
      for part in (key .. "."):gmatch("([^.]*)%.") do
        if part:match("^%d+$") then
          local n = tonumber(part) + delta
          if n < 0 then raise("ValueError", ("%s(): key '%s' has list position 0, but tc positions start at 1"):format(what, key)) end
          part = tostring(math.tointeger(n))
        end
        parts[#parts + 1] = part
      end
      local name = table.concat(parts, ".")
      if out[name] ~= nil then raise("ValueError", ("%s(): two keys map to '%s'"):format(what, name)) end
      out[name] = t
    end
    return out
  end
end

M.from_torch_state_dict = renamer(1, "from_torch_state_dict")
M.to_torch_state_dict = renamer(-1, "to_torch_state_dict")

-- Attaches the functions to tc.utils (called by tc.nn when it loads).
function M.install()
  tc.utils = tc.utils or {}
  tc.utils.from_torch_state_dict = M.from_torch_state_dict
  tc.utils.to_torch_state_dict = M.to_torch_state_dict
end
return M
