-- JSON fixtures of the Lua tests (tests/fixtures/<dir>/*.json, written by tests/fixtures/gen_*.py with
-- PyTorch 1.13): `local fixtures = require "fixtures"`; fixtures.json(path) decodes
-- tests/fixtures/<path> once; helpers to compare against the float32 values they hold.
local tc = require "tc"
local json = require "json"

local M = {}
local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local cache = {}

function M.json(path)
  if cache[path] == nil then
    local f = assert(io.open(here .. "/../fixtures/" .. path))
    cache[path] = json.decode(f:read("a"))
    f:close()
  end
  return cache[path]
end

-- tests/fixtures/train/optim.json (gen_optim.py): optimizers, schedulers, gradient clipping.
function M.optim() return M.json("train/optim.json") end

-- A float32 tensor of `shape` from a fixture's flat values.
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
