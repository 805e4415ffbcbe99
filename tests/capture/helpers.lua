-- Shared helpers of the capture tests: value checks, stats deltas and running a script in a
-- separate tcrun (for stderr and exit status).
local tc = require "tc"
local h = {}

function h.close(a, b, what, tol)
  tol = tol or 1e-5
  if tc.is_tensor(a) then
    assert(tc.is_tensor(b), (what or "value") .. ": expected a tensor")
    if a.shape ~= b.shape then error(("%s: shape %s vs %s"):format(what or "tensor", tostring(a.shape), tostring(b.shape)), 2) end
    local d = (a:double() - b:double()):abs():max():item()
    if d > tol then error(("%s: max difference %g"):format(what or "tensor", d), 2) end
    return
  end
  if a ~= b then error(("%s: expected %s, got %s"):format(what or "value", tostring(b), tostring(a)), 2) end
end

function h.eq(actual, expected, what)
  if actual ~= expected then error(("%s: expected %s, got %s"):format(what or "value", tostring(expected), tostring(actual)), 2) end
end

-- Counters since the last reset (every test file starts from tc.compiler.reset()).
function h.stats() return tc.compiler.stats() end

-- Runs Lua code in a fresh tcrun; returns its combined stdout+stderr and exit status.
function h.run(code, options)
  local exe = h.tcrun or "build/tcrun"
  local path = os.tmpname() .. ".lua"
  local f = assert(io.open(path, "w"))
  f:write(code)
  f:close()
  local p = assert(io.popen(exe .. " " .. (options or "") .. " " .. path .. " 2>&1"))
  local out = p:read("a")
  local ok, _, rc = p:close()
  os.remove(path)
  return out, ok and 0 or rc
end

function h.count(s, pattern)
  local n = 0
  for _ in s:gmatch(pattern) do n = n + 1 end
  return n
end

return h
