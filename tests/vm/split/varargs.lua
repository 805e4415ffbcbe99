-- Split-check cases: varargs, multiple results, open results feeding calls, returns and tables.
local function count(...)
  return select("#", ...)
end

local function pack_all(...)
  local t = {...}
  local p = table.pack(...)
  return #t, p.n, ...
end

local function pass_through(f, ...)
  local a, b = ...
  return f(a, b, ...)
end

local function three() return 1, 2.5, "three" end

local function open_args()
  local t = {three()}
  local n = count(three())
  local s = string.format("%d %.1f %s", three())
  return #t, n, s, three()
end

local function open_return(x)
  if x then return x, three() end
  return three()
end

local function nil_holes(...)
  local a, b, c, d = ...
  return select("#", ...), a, b, c, d, select(2, ...)
end

local function vararg_loop(...)
  local s = 0
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    s = s + (v or 0)
  end
  return s, ...
end

local function adjust(...)
  local x, y = three()
  local t = {three(), three()}
  local u = {(three())}
  return x, y, #t, #u, (three())
end

local function tail(n, ...)
  if n == 0 then return ... end
  return tail(n - 1, n, ...)
end

return {
  {count, 1, nil, 3, n = 4},
  {pack_all, "a", "b", "c"},
  {pass_through, math.max, 3, 9, 4},
  {open_args},
  {open_return, false}, {open_return, 7},
  {nil_holes, 1, nil, 3, nil, n = 5},
  {vararg_loop, 1, 2, nil, 4, n = 4},
  {adjust},
  {tail, 3, "end"},
}
