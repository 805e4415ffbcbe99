-- Random ops in a compiled graph draw from the stream exactly as eager does, on every backend:
-- compiling must not draw (lowering computed randn's shape by running its kernel once), and a
-- random tensor that is dead when its graph ends still advances the stream.
local tc = require "tc"
local h = require "helpers"

local function draws(f)
  tc.manual_seed(7)
  local r = f(tc.ones(2))
  return r, tc.randn(3)
end

local function kept(x) return tc.randn(3, 3) * x:sum() end
local function dead(x) local t = tc.randn(3, 3) io.stdout:write("") return x + 1 end

for _, fn in ipairs({kept, dead}) do
  local r1, after1 = draws(fn)
  for _, backend in ipairs({"eager", "loopir", "cpu"}) do
    tc.compiler.reset()
    local r2, after2 = draws(tc.compile(fn, {backend = backend}))
    h.close(r2, r1, backend .. ": result", 0)
    h.close(after2, after1, backend .. ": the next draw after the compiled call", 0)
  end
end
