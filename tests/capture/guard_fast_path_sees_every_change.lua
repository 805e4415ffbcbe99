-- The guards' fast path (tables compared byte for byte with the last passing call, capture/guards.h)
-- must take every repeated call of an unchanged model, and must see every change a user can make
-- between calls: results always equal eager.
local tc = require "tc"
local nn = require "tc.nn"
local seed = require "seed_layers"
local h = require "helpers"

local x = tc.randn(10, 10)
local function fast_hits() return h.stats().guard_fast_hits end

-- 1. an unchanged model: after two full checks every call is a fast hit
local model = seed.Model({num_layers = 4})
local cm = tc.compile(model)
for _ = 1, 5 do h.close(cm(x), model(x), "unchanged model") end
assert(fast_hits() >= 3, "repeated calls take the fast path, got " .. fast_hits())

-- a new input tensor each call (same shape) keeps the fast path: arguments are re-read
local before = fast_hits()
for _ = 1, 3 do
  local y = tc.randn(10, 10)
  h.close(cm(y), model(y), "new input")
end
assert(fast_hits() == before + 3, "new input tensors still take the fast path")

-- 2. a parameter replaced by another tensor of the same shape: its values are used
local function settle() for _ = 1, 3 do cm(x) end end
settle()
model.layers[2].linear1.weight = nn.Parameter(tc.randn(10, 10))
h.close(cm(x), model(x), "replaced parameter")
settle()
-- 3. a parameter changed in place (values): seen without any table change
tc.no_grad(function() model.layers[3].linear2.bias:add_(1) end)
h.close(cm(x), model(x), "parameter changed in place")
settle()
-- 4. a parameter whose metadata changes in place (values are the same: the guard must fail)
local recompiles = h.stats().recompiles
model.layers[1].linear1.weight.requires_grad = false
h.close(cm(x), model(x), "requires_grad changed in place")
h.eq(h.stats().recompiles, recompiles + 1, "requires_grad changed in place recompiles")
settle()
-- 5. a submodule swapped for one of another class
model.layers[4].relu1 = nn.Tanh()
h.close(cm(x), model(x), "submodule of another class")
settle()
-- (a fresh cache: the changes so far made recompiles, and the limit is 8 entries)
tc.compiler.reset()
cm = tc.compile(model)
settle()
-- 6. a hook added to a submodule
local calls = 0
model.layers[2]:register_forward_hook(function(_, _, out) calls = calls + 1; return out * 2 end)
h.close(cm(x), model(x), "hook added")
assert(calls == 2, "the hook ran in the compiled call and in the eager one")
settle()
-- 7. a field removed with rawset, and a layer appended to the ModuleList
rawset(model.layers[2], "_forward_hooks", nil)
h.close(cm(x), model(x), "hook removed by rawset")
settle()
model.layers:append(seed.Layer())
h.close(cm(x), model(x), "layer appended")
settle()
-- 8. the class's forward replaced (a table the model only reaches through its metatable)
local Layer = getmetatable(model.layers[1])
local old_forward = Layer.forward
Layer.forward = function(self, v) return old_forward(self, v) + 1 end
h.close(cm(x), model(x), "class method replaced")
Layer.forward = old_forward
h.close(cm(x), model(x), "class method restored")

-- 9. tables passed as arguments and captured as upvalues
local cfg = {scale = 2, inner = {shift = 1}}
local function f(t, v) return v * t.scale + t.inner.shift end
local cf = tc.compile(f)
for _ = 1, 3 do h.close(cf(cfg, x), f(cfg, x), "config argument") end
cfg.scale = 3
h.close(cf(cfg, x), f(cfg, x), "config field changed")
cfg.inner.shift = 5
h.close(cf(cfg, x), f(cfg, x), "nested config field changed")
cfg.inner = {shift = 7}
h.close(cf(cfg, x), f(cfg, x), "nested table replaced")
local other = {scale = 3, inner = {shift = 7}}
h.close(cf(other, x), f(other, x), "another table of the same structure")

local state = {w = tc.ones(10, 10)}
local function g(v) return v + state.w end
local cg = tc.compile(g)
for _ = 1, 3 do h.close(cg(x), g(x), "upvalue table") end
state.w = tc.zeros(10, 10)
h.close(cg(x), g(x), "upvalue table's tensor replaced")
state = {w = tc.full({10, 10}, 3)}
h.close(cg(x), g(x), "upvalue rebound to another table")

-- 10. a model dropped and collected, a new one built (its tables may reuse the old addresses)
for round = 1, 3 do
  local m = seed.Model({num_layers = 2})
  local c = tc.compile(m)
  for _ = 1, 3 do h.close(c(x), m(x), "fresh model " .. round) end
  m, c = nil, nil
  collectgarbage()
  collectgarbage()
end

-- 11. globals written between calls do not matter, and do not stop the fast path
before = fast_hits()
for i = 1, 4 do
  GLOBAL_COUNTER = i
  h.close(cm(x), model(x), "global written between calls")
end
GLOBAL_COUNTER = nil
assert(fast_hits() >= before + 3, "writing a global keeps the fast path")

-- 12. regional compilation: one compiled Layer.forward serves many instances
local rm = seed.Model({num_layers = 6, regional = true})
for _ = 1, 3 do h.close(rm(x), seed.Model.forward(rm, x), "regional") end

-- 13. a module that stores its output on itself every call: the table changes on every call, so
-- the memo misses every time and is given up after a few rebuilds; results stay equal to eager
local Keeper = nn.Module:extend("Keeper")
function Keeper:__init() self.lin = nn.Linear(10, 10) end
function Keeper:forward(v)
  local out = self.lin(v)
  self.last_out = out
  return out
end
tc.compiler.reset()
local keeper = Keeper()
local ck = tc.compile(keeper)
for i = 1, 12 do
  local y = tc.randn(10, 10)
  local out = ck(y)
  h.close(out, keeper.lin(y), "a field written every call, call " .. i)
  assert(rawequal(keeper.last_out, out), "the stored output is the returned one")
end
assert(h.stats().traces <= 2, "no recompile per call, got " .. h.stats().traces .. " traces")
