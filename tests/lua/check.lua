-- Assertions shared by the Lua API tests (tests/lua/test_*.lua): `local check = require "check"`.
local tc = require "tc"
local check = {}

local function show(v)
  if type(v) == "table" and getmetatable(v) == nil then
    local parts = {}
    for i = 1, #v do parts[i] = show(v[i]) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end
check.show = show

function check.eq(actual, expected, what)
  if actual ~= expected then
    error(("%sexpected %s, got %s"):format(what and what .. ": " or "", show(expected), show(actual)), 2)
  end
end

-- Deep equality of plain values and nested tables (numbers compared exactly, 1 == 1.0).
local function deep_eq(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  if #a ~= #b then return false end
  for i = 1, #a do
    if not deep_eq(a[i], b[i]) then return false end
  end
  return true
end
function check.same(actual, expected, what)
  if not deep_eq(actual, expected) then
    error(("%sexpected %s, got %s"):format(what and what .. ": " or "", show(expected), show(actual)), 2)
  end
end

-- A tensor's values (tolist) against nested tables, with tolerance for floats.
local function close(a, b, tol)
  if type(a) == "table" then
    if type(b) ~= "table" or #a ~= #b then return false end
    for i = 1, #a do
      if not close(a[i], b[i], tol) then return false end
    end
    return true
  end
  if type(a) == "number" and type(b) == "number" then
    if a ~= a then return b ~= b end
    return a == b or math.abs(a - b) <= tol * (1 + math.abs(b))
  end
  return a == b
end
function check.values(t, expected, tol, what)
  assert(tc.is_tensor(t), (what or "value") .. " is not a tensor: " .. show(t))
  local got = t:tolist()
  if not close(got, expected, tol or 1e-5) then
    error(("%sexpected values %s, got %s"):format(what and what .. ": " or "", show(expected), show(got)), 2)
  end
end

function check.shape(t, expected, what)
  check.same(t.shape, expected, what or "shape")
end

-- Runs f and checks that it raises a tc error of `kind`; returns the error table.
function check.raises(kind, f, ...)
  local ok, e = pcall(f, ...)
  if ok then error("expected a " .. kind .. ", but the call succeeded", 2) end
  if type(e) ~= "table" or e.kind ~= kind then
    error(("expected a %s, got %s"):format(kind, tostring(type(e) == "table" and (e.kind .. ": " .. tostring(e.message)) or e)), 2)
  end
  if getmetatable(e) ~= tc[kind] then error("error table does not have metatable tc." .. kind, 2) end
  return e
end

-- The line of the caller of check.line() (to compare error positions).
function check.line() return debug.getinfo(2, "l").currentline end

-- The tcrun running these tests (arg[-1] under tcrun; $TCRUN overrides), else ./build/tcrun.
check.TCRUN = os.getenv("TCRUN") or (arg and arg[-1] and arg[-1]:match("tcrun$") and arg[-1]) or "./build/tcrun"

-- Runs a shell command; returns its output (stdout and stderr) and exit status.
function check.run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1; echo \"exit=$?\""))
  local out = p:read("a")
  p:close()
  local body, code = out:match("^(.*)exit=(%d+)\n$")
  return body, tonumber(code)
end

-- A new empty directory under the system's temporary folder; the names in a directory, sorted.
function check.tmpdir()
  local p = os.tmpname()
  os.remove(p)
  os.execute("mkdir -p '" .. p .. "'")
  return p
end
function check.ls(dir)
  local out, p = {}, io.popen("ls '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null")
  for n in p:lines() do out[#out + 1] = n end
  p:close()
  return out
end

-- Ends the running test as skipped, not passed (run.lua counts and prints it): a test that needs
-- what this machine lacks calls `check.skip("no CUDA device")`.
check.Skip = {__tostring = function(s) return "skipped: " .. s.reason end}
function check.skip(reason) error(setmetatable({reason = reason}, check.Skip), 2) end

return check
