-- A small JSON reader for the test fixtures (`local json = require "json"`): json.decode(text)
-- returns Lua values; null becomes json.null (a sentinel), so arrays keep their length.
local json = {null = setmetatable({}, {__name = "json.null", __tostring = function() return "null" end})}

local escapes = {['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t"}

function json.decode(text)
  local pos = 1
  local function fail(what) error(("json: %s at offset %d"):format(what, pos), 0) end
  local function skip() pos = text:find("[^ \t\r\n]", pos) or #text + 1 end
  local value
  local function string_()
    local out = {}
    pos = pos + 1
    while true do
      local c = text:sub(pos, pos)
      if c == "" then fail("unterminated string") end
      if c == '"' then pos = pos + 1; return table.concat(out) end
      if c == "\\" then
        local e = text:sub(pos + 1, pos + 1)
        if e == "u" then
          out[#out + 1] = utf8.char(tonumber(text:sub(pos + 2, pos + 5), 16))
          pos = pos + 6
        else
          out[#out + 1] = escapes[e] or fail("bad escape")
          pos = pos + 2
        end
      else
        out[#out + 1] = c
        pos = pos + 1
      end
    end
  end
  local function list(close, item)
    pos = pos + 1
    skip()
    if text:sub(pos, pos) == close then pos = pos + 1; return end
    while true do
      item()
      skip()
      local c = text:sub(pos, pos)
      pos = pos + 1
      if c == close then return end
      if c ~= "," then fail("expected ',' or '" .. close .. "'") end
    end
  end
  function value()
    skip()
    local c = text:sub(pos, pos)
    if c == "{" then
      local t = {}
      list("}", function()
        skip()
        if text:sub(pos, pos) ~= '"' then fail("expected a key") end
        local k = string_()
        skip()
        if text:sub(pos, pos) ~= ":" then fail("expected ':'") end
        pos = pos + 1
        t[k] = value()
      end)
      return t
    elseif c == "[" then
      local t = {}
      list("]", function() t[#t + 1] = value() end)
      return t
    elseif c == '"' then
      return string_()
    end
    for word, v in pairs {["true"] = true, ["false"] = false, null = json.null} do
      if text:sub(pos, pos + #word - 1) == word then pos = pos + #word; return v end
    end
    local num = text:match("^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
    if num == nil or num == "" then fail("unexpected character") end
    pos = pos + #num
    if num:find("[.eE]") then return tonumber(num) end
    return math.tointeger(tonumber(num))
  end
  local v = value()
  skip()
  if pos <= #text then fail("trailing characters") end
  return v
end

return json
