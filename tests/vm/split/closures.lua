-- Split-check cases: closures, upvalues (shared, read-only and written), recursion, helpers.
local counter_base = 100

local function make_counter(step)
  local n = 0
  local function inc() n = n + step; return n end
  local a, b = inc(), inc()
  return a + b, inc()
end

local function read_only_capture(x)
  local y = x * 2
  local get = function() return x + y end
  local z = get() + 1
  return z, get()
end

local function shared_cells()
  local log = {}
  local function add(v) log[#log + 1] = v end
  for i = 1, 3 do add(i) end
  local fs = {}
  for i = 1, 3 do fs[i] = function() return i * 10 end end
  return #log, fs[1]() + fs[2]() + fs[3]()
end

local function helpers(n)
  local function square(v) return v * v end
  local function cube(v) return v * square(v) end
  local s = 0
  for i = 1, n do s = s + cube(i) - square(i) end
  return s
end

local function fib(n)
  local function f(k) if k < 2 then return k end return f(k - 1) + f(k - 2) end
  return f(n)
end

local function upvalue_update()
  counter_base = counter_base + 1
  local before = counter_base
  local bump = function(d) counter_base = counter_base + d end
  bump(5)
  return before, counter_base
end

local function captured_then_written(x)
  local v = x
  local get = function() return v end
  v = v + 1
  local w = get()
  v = v * 2
  return w, get(), v
end

local function closure_factory()
  local made = {}
  for i = 1, 3 do
    local k = i * i
    made[i] = function(d) k = k + d; return k end
  end
  return made[1](1), made[2](2), made[3](3), made[1](1)
end

return {
  {make_counter, 3},
  {read_only_capture, 5},
  {shared_cells},
  {helpers, 4},
  {fib, 7},
  {upvalue_update},
  {captured_then_written, 4},
  {closure_factory},
}
