-- Plain Lua values to one string and back, exactly: the non-tensor part of a training checkpoint
-- (tc.trainer), kept in a safetensors header's metadata.
--
--   local serial = require "tc.serial"
--   local s = serial.encode({epoch = 3, lr = 0.1, seen = {1, 2}})   -- a string
--   local v = serial.decode(s)                                         -- an equal table
--
-- Values: nil-free tables (any integer, float, string or boolean keys; no cycles), integers,
-- floats (bit for bit: hexadecimal, with inf, -inf and nan), strings (any bytes), booleans. A
-- function, userdata or tensor is a ValueError naming its path. The grammar is typed and
-- length-prefixed, read by a parser (never by `load`), so a damaged string is an IOError and
-- never runs code:
--   i<decimal>;   f<%a or inf/-inf/nan>;   s<length>:<bytes>   t   b (false)   {<key><value>...}
local M = {}

local tc = require "tc"
local function raise(kind, msg)
  if tc._C and tc._C.raise then tc._C.raise(kind, msg) end
  error(kind .. ": " .. msg, 3)
end

local function encode(v, out, path, active)
  local t = type(v)
  if t == "number" then
    if math.type(v) == "integer" then out[#out + 1] = "i" .. v .. ";"
    elseif v ~= v then out[#out + 1] = "fnan;"
    elseif v == math.huge then out[#out + 1] = "finf;"
    elseif v == -math.huge then out[#out + 1] = "f-inf;"
    else out[#out + 1] = ("f%a;"):format(v) end
  elseif t == "string" then out[#out + 1] = "s" .. #v .. ":" .. v
  elseif t == "boolean" then out[#out + 1] = v and "t" or "b"
  elseif t == "table" and getmetatable(v) == nil then
    if active[v] then raise("ValueError", "tc.serial.encode: " .. path .. " refers back to itself") end
    active[v] = true
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    -- a fixed order (integers, then the rest by their text) so equal tables give equal strings
    table.sort(keys, function(a, b)
      local ia, ib = math.type(a) == "integer", math.type(b) == "integer"
      if ia ~= ib then return ia end
      if ia then return a < b end
      local ta, tb = type(a) .. tostring(a), type(b) .. tostring(b)
      return ta < tb
    end)
    out[#out + 1] = "{"
    for _, k in ipairs(keys) do
      local tk = type(k)
      if tk ~= "number" and tk ~= "string" and tk ~= "boolean" then
        raise("ValueError", ("tc.serial.encode: %s has a %s key"):format(path, tk))
      end
      encode(k, out, path, active)
      encode(v[k], out, path .. "." .. tostring(k), active)
    end
    out[#out + 1] = "}"
    active[v] = nil
  else
    local what = t == "table" and "a table with a metatable (an object)" or ("a " .. t)
    raise("ValueError", ("tc.serial.encode: %s is %s, which a checkpoint cannot hold"):format(path, what))
  end
end

function M.encode(v, name)
  local out = {}
  encode(v, out, name or "the value", {})
  return table.concat(out)
end

function M.decode(s, name)
  if type(s) ~= "string" then raise("IOError", ("%s: expected a string, got %s"):format(name or "tc.serial.decode", type(s))) end
  local pos = 1
  local function bad(what) raise("IOError", ("%s is damaged: %s at byte %d"):format(name or "the serialized state", what, pos)) end
  local value
  local function number_until_semicolon()
    local e = s:find(";", pos, true)
    if not e then bad("an unterminated number") end
    local text = s:sub(pos, e - 1)
    pos = e + 1
    return text
  end
  function value(depth)
    if depth > 200 then bad("tables nested too deeply") end
    local c = s:sub(pos, pos)
    pos = pos + 1
    if c == "i" then
      local text = number_until_semicolon()
      local v = text:match("^%-?%d+$") and math.tointeger(tonumber(text))
      if not v then bad("a malformed integer '" .. text .. "'") end
      return v
    elseif c == "f" then
      local text = number_until_semicolon()
      if text == "nan" then return 0 / 0 elseif text == "inf" then return math.huge elseif text == "-inf" then return -math.huge end
      local v = text:match("^%-?0x[%x.]+p[+-]?%d+$") and tonumber(text)
      if not v then bad("a malformed float '" .. text .. "'") end
      return v
    elseif c == "s" then
      local n = s:match("^(%d+):", pos)
      if not n then bad("a malformed string length") end
      pos = pos + #n + 1
      local len = tonumber(n)
      if pos + len - 1 > #s then bad("a string running past the end") end
      local v = s:sub(pos, pos + len - 1)
      pos = pos + len
      return v
    elseif c == "t" then return true
    elseif c == "b" then return false
    elseif c == "{" then
      local t = {}
      while true do
        if pos > #s then bad("an unterminated table") end
        if s:sub(pos, pos) == "}" then pos = pos + 1; return t end
        local k = value(depth + 1)
        if k ~= k then bad("a nan key") end
        t[k] = value(depth + 1)
      end
    elseif c == "" then bad("an unexpected end")
    else bad(("an unexpected '%s'"):format(c)) end
  end
  local v = value(0)
  if pos ~= #s + 1 then bad("trailing bytes") end
  return v
end

return M
