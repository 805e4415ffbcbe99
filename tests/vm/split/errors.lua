-- Split-check cases: pcall/xpcall, error values and positions, runtime errors, assert.
local function guarded(x)
  local ok, err = pcall(function(v)
    if v > 2 then error("too big: " .. v) end
    return v * 2
  end, x)
  return ok, err
end

local function error_values(kind)
  local ok, e = pcall(error, kind == 1 and {code = 42} or "msg", 0)
  local ok2, e2 = pcall(error)
  local ok3, e3 = pcall(error, setmetatable({}, {__tostring = function() return "obj" end}))
  return ok, type(e) == "table" and e.code or e, ok2, e2, ok3, tostring(e3)
end

local function handler(x)
  local log = {}
  local ok, r = xpcall(function() return x.field end, function(m)
    log[#log + 1] = "handled"
    return "H:" .. m
  end)
  return ok, r, log[1]
end

local function runtime_errors(kind)
  local t = {}
  if kind == 1 then return t + 1 end
  if kind == 2 then return t < 1 end
  if kind == 3 then return ("x")() end
  -- (integer // 0 and % 0 are left out: Lua 5.4.4 reports them with a stale line number)
  if kind == 4 then return 1 // 0.0 end
  if kind == 5 then return 1 % math.huge end
  if kind == 6 then return 1.5 | 1 end
  if kind == 7 then return "a" | 1 end
  if kind == 8 then return #nil end
  if kind == 9 then return -{} end
  if kind == 10 then return {} .. "x" end
  if kind == 11 then return assert(false, "assert message") end
  if kind == 12 then return assert(nil) end
  if kind == 13 then local up = nil; return up.x end
  return "no error"
end

local function nested_pcall(n)
  local depth = 0
  local function dive(k)
    depth = depth + 1
    if k == 0 then error("bottom", 1) end
    local ok, e = pcall(dive, k - 1)
    return (ok and "ok" or "caught") .. ":" .. tostring(e)
  end
  return dive(n), depth
end

local function error_after_side_effects(n)
  local t = {}
  for i = 1, n do
    t[i] = i
    print("step", i)
    if i == 3 then error("stopped at " .. i) end
  end
  return #t
end

return {
  {guarded, 1}, {guarded, 5},
  {error_values, 1}, {error_values, 2},
  {handler, nil}, {handler, {field = 3}},
  {runtime_errors, 1}, {runtime_errors, 2}, {runtime_errors, 3}, {runtime_errors, 4},
  {runtime_errors, 5}, {runtime_errors, 6}, {runtime_errors, 7}, {runtime_errors, 8},
  {runtime_errors, 9}, {runtime_errors, 10}, {runtime_errors, 11}, {runtime_errors, 12},
  {runtime_errors, 13}, {runtime_errors, 14},
  {nested_pcall, 2},
  {error_after_side_effects, 2}, {error_after_side_effects, 5},
}
