-- Shared by the optimizer, scheduler and clipping tests: tests/fixtures/optim.json (written by
-- tests/fixtures/gen_optim.py with PyTorch 1.13), decoded once, and helpers over it.
local tc = require "tc"
local json = require "json"

local M = {}
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local fixture

function M.get()
  if not fixture then
    local f = assert(io.open(here .. "/../fixtures/optim.json"))
    fixture = json.decode(f:read("a"))
    f:close()
  end
  return fixture
end

-- A float32 tensor of `shape` from the fixture's flat values.
function M.tensor(values, shape) return tc.tensor(values):view(shape) end

-- got within |want| * 1e-5 + 1e-6 of want, elementwise (float32 reference values).
function M.assert_close(got, want, what)
  local diff = (got:double() - want:double()):abs()
  local excess = (diff - (want:double():abs() * 1e-5 + 1e-6)):amax():item()
  if excess > 0 or excess ~= excess then
    error(("%s: max |difference| %.3g"):format(what, diff:amax():item()), 2)
  end
end

return M
