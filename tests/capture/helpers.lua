-- Shared helpers of the capture tests: value checks, stats deltas and running a script in a
-- separate tcrun (for stderr and exit status).
local tc = require "tc"
local h = {}

function h.close(a, b, what, tol)
  tol = tol or 1e-5
  if tc.is_tensor(a) then
    assert(tc.is_tensor(b), (what or "value") .. ": expected a tensor")
    if a.shape ~= b.shape then error(("%s: shape %s vs %s"):format(what or "tensor", tostring(a.shape), tostring(b.shape)), 2) end
    local d = (a:cpu():double() - b:cpu():double()):abs():max():item()  -- on any devices
    if d > tol then error(("%s: max difference %g"):format(what or "tensor", d), 2) end
    return
  end
  if a ~= b then error(("%s: expected %s, got %s"):format(what or "value", tostring(b), tostring(a)), 2) end
end

-- A compiled result against eager's, as DESIGN.md §4 allows: generated code may sum in another
-- order than eager's kernels (a tiny matmul as a generated reduction, a vectorized sum), so float
-- results agree to a few units in the last place relative to their size (3x looser for float16
-- and bfloat16); integer and bool results, and everything data movement makes, stay exact (compare
-- those with h.close(a, b, what, 0)).
local float_tol = {[tc.float64] = 1e-12, [tc.float32] = 1e-5, [tc.float16] = 3e-3, [tc.bfloat16] = 3e-2}
function h.close_to_eager(compiled, eager, what)
  assert(tc.is_tensor(compiled) and tc.is_tensor(eager), (what or "value") .. ": expected tensors")
  if compiled.dtype ~= eager.dtype then
    error(("%s: dtype %s vs %s"):format(what or "tensor", tostring(compiled.dtype), tostring(eager.dtype)), 2)
  end
  if compiled.shape ~= eager.shape then
    error(("%s: shape %s vs %s"):format(what or "tensor", tostring(compiled.shape), tostring(eager.shape)), 2)
  end
  local tol = float_tol[eager.dtype] or 0
  local a, b = compiled:cpu():double(), eager:cpu():double()
  local excess = ((a - b):abs() - (b:abs() + 1) * tol):max():item()
  if compiled:numel() > 0 and excess > 0 then
    error(("%s: max difference %g beyond tolerance %g"):format(what or "tensor", (a - b):abs():max():item(), tol), 2)
  end
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
  -- (trace counts must not depend on dims an earlier run made dynamic: capture/remembered_dynamic.h)
  local p = assert(io.popen("TC_REMEMBER_DYNAMIC=0 " .. exe .. " " .. (options or "") .. " " .. path .. " 2>&1"))
  local out = p:read("a")
  local ok, _, rc = p:close()
  os.remove(path)
  return out, ok and 0 or rc
end

-- The torch.compile tutorial's training step: train(x, y) -> loss.
function h.train_function(model, crit, opt)
  return function(xb, yb)
    opt:zero_grad()
    local loss = crit(model(xb), yb)
    loss:backward()
    opt:step()
    return loss
  end
end

function h.count(s, pattern)
  local n = 0
  for _ in s:gmatch(pattern) do n = n + 1 end
  return n
end

-- Ends the running script as skipped, not passed (run.lua counts and prints it): a script that
-- needs what this machine lacks calls `h.skip("no CUDA device")`.
h.Skip = {__tostring = function(s) return "skipped: " .. s.reason end}
function h.skip(reason) error(setmetatable({reason = reason}, h.Skip), 2) end

return h
