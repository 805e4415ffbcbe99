-- Errors are tables {kind, message, file, line} with metatable tc.<Kind>, raised at the user's
-- line (never inside tc's own Lua code), with __tostring "file.lua:LINE: message".
local tc = require "tc"
local check = require "check"
local T = {}
local FILE = "test_errors.lua"

local function at(e, line)
  check.eq(e.file:sub(-#FILE), FILE, "file")
  check.eq(e.line, line, "line")
  check.eq(tostring(e), e.file .. ":" .. line .. ": " .. e.message, "tostring")
end

function T.shape_error_from_an_op_method()
  local a, b = tc.ones(10, 10), tc.ones(5, 3)
  local line = check.line() + 1
  local ok, e = pcall(function() return a:matmul(b) end)
  check.eq(ok, false)
  check.eq(type(e), "table")
  check.eq(e.kind, "ShapeError")
  check.eq(getmetatable(e), tc.ShapeError)
  check.eq(e.message, "mat1 and mat2 shapes cannot be multiplied (10x10 and 5x3)")
  at(e, line)
end

function T.error_inside_a_user_function_points_at_the_op_call()
  local function f(x)
    return x:sum(5)  -- this line
  end
  local line = check.line() - 2
  local e = check.raises("IndexError", f, tc.ones(2))
  at(e, line)
end

function T.errors_through_metamethods()
  local a, b = tc.ones(2, 3), tc.ones(4)
  local line = check.line() + 1
  local e = check.raises("ShapeError", function() return a + b end)
  at(e, line)
  line = check.line() + 1
  e = check.raises("IndexError", function() return a[7] end)
  at(e, line)
  line = check.line() + 1
  e = check.raises("ValueError", function() a.nope = 1 end)
  at(e, line)
  line = check.line() + 1
  e = check.raises("ValueError", function() return a < 1 end)
  at(e, line)
end

function T.errors_through_lua_sugar_point_at_the_user()
  local x = tc.ones(2, 3)
  local line = check.line() + 1
  local e = check.raises("ShapeError", function() return x:max(tc.ones(4)) end)
  at(e, line)
  line = check.line() + 1
  e = check.raises("ValueError", function() local f = tc.compile(function() end, {fullgraf = true}) return f end)
  at(e, line)
  line = check.line() + 1
  e = check.raises("DTypeError", function() return tc.ones(2, {dtype = tc.int64}):add_(0.5) end)
  at(e, line)
  if not tc.cuda.is_available() then
    line = check.line() + 1
    e = check.raises("DeviceError", function() return x:to("cuda") end)
    at(e, line)
  end
end

function T.argument_errors_are_value_errors()
  local e = check.raises("ValueError", function() return tc.ones(2):add(print) end)
  check.eq(e.message:find("add", 1, true) ~= nil, true, "names the op: " .. e.message)
  check.raises("ValueError", function() return tc.ones(2):sum(2, {keepdims = true}) end)
  check.raises("ValueError", function() return tc.ones(2, {{1}}) end)
  check.raises("ValueError", function() return tc.zeros("a") end)
end

function T.error_kinds_are_exposed()
  for _, kind in ipairs {"ShapeError", "DTypeError", "DeviceError", "IndexError", "ValueError", "CompileError",
                         "GraphBreakError", "OutOfMemoryError", "NotImplementedError", "IOError"} do
    check.eq(type(tc[kind]), "table", kind)
    check.eq(tc[kind].kind, kind)
  end
end

function T.errors_propagate_through_error_and_pcall()
  local ok, e = pcall(function()
    local ok2, e2 = pcall(function() return tc.ones(2):view(3) end)
    error(e2)  -- rethrow keeps the table
  end)
  check.eq(ok, false)
  check.eq(e.kind, "ShapeError")
end

return T
