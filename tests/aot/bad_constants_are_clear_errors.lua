-- load_constants binds by name: a missing name (strict), a wrong shape or dtype, a non-tensor
-- are errors naming the constant; names the package lacks are ignored (a whole model's state
-- dict may be given); running with an unbound constant is an error.
local tc = require "tc"
local h = require "helpers"
local S = require "seed_layers"
local layer = S.Layer()
local x = tc.randn(10, 10)
local pkg, path = h.round_trip(layer, {x})
h.expect_kind("ValueError", "constant 'linear1.weight' is not bound (call load_constants first)", function() return pkg(x) end)
local sd = layer:state_dict()
local function with(k, v)
  local t = {}
  for n, p in pairs(sd) do t[n] = p end
  t[k] = v
  return t
end
h.expect_kind("ValueError", "missing constant 'linear2.bias'", function() pkg:load_constants(with("linear2.bias", nil)) end)
h.expect_error("constant 'linear1.weight' is float32[10, 9]; the package needs float32[10, 10]",
               function() pkg:load_constants(with("linear1.weight", tc.randn(10, 9))) end)
h.expect_error("constant 'linear1.bias' is float64[10]", function() pkg:load_constants(with("linear1.bias", tc.randn(10, {dtype = tc.float64}))) end)
h.expect_error("the value for 'linear1.bias' is a number", function() pkg:load_constants(with("linear1.bias", 3)) end)
-- a failed load binds nothing
h.expect_error("is not bound", function() return pkg(x) end)
-- unknown names are ignored; non-strict: missing ones keep their binding
pkg:load_constants(with("extra.weight", x))
local other = S.Layer()
pkg:load_constants({["linear2.weight"] = other.linear2.weight, ["not.there"] = x}, {strict = false})
local want = tc.no_grad(function()
  local a = tc.sigmoid(layer.linear1(x):relu())
  return tc.nn.functional.linear(a, other.linear2.weight, layer.linear2.bias):relu()
end)
h.close_to_eager(pkg(x), want, "partial rebinding")
os.remove(path)

-- constants are bound by reference (no copy): in-place updates of the weights are seen
local p2, path2 = h.round_trip(layer, {x})
p2:load_constants(layer:state_dict())
tc.no_grad(function() layer.linear2.bias:add_(1.5) end)
h.close_to_eager(p2(x), tc.no_grad(function() return layer(x) end), "after an in-place weight update")
os.remove(path2)
