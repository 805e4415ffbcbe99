-- A dim named dynamic at export takes any size in the package; the other dims stay fixed, and a
-- wrong size or dtype is an error naming the input.
local tc = require "tc"
local h = require "helpers"
local S = require "seed_layers"
tc.manual_seed(3)
local layer = S.Layer()
local pkg, path = h.round_trip(layer, {tc.randn(4, 10)}, {dynamic = {x = {1}}})
pkg:load_constants(layer:state_dict())
h.eq(pkg:manifest().inputs[1].str, "float32[s0, 10]", "input spec")
for _, n in ipairs({1, 3, 17, 64}) do
  local x = tc.randn(n, 10)
  h.close_to_eager(pkg(x), tc.no_grad(function() return layer(x) end), "batch " .. n)
end
-- non-contiguous inputs are accepted (copied)
local xt = tc.randn(10, 6):t()
h.close_to_eager(pkg(xt), tc.no_grad(function() return layer(xt) end), "transposed input")
h.expect_error("package input 1 ('x') is float32[5, 9]; the package takes float32[s0, 10]", function() return pkg(tc.randn(5, 9)) end)
h.expect_error("is float64[5, 10]", function() return pkg(tc.randn(5, 10, {dtype = tc.float64})) end)
h.expect_error("takes 1 inputs, got 2", function() return pkg(tc.randn(5, 10), tc.randn(5, 10)) end)
os.remove(path)

-- by position, on a function (not a module), with a tensor from an upvalue as its constant
local w = tc.randn(10, 10)
local function f(a, b) return (a:matmul(w) + b):tanh() end
local fp, fpath, ep = h.round_trip(f, {tc.randn(3, 10), tc.randn(10)}, {dynamic = {{1}}})
h.eq(ep.constant_names[1], "w", "an upvalue's tensor is a constant named after the upvalue")
fp:load_constants({w = w})
local a, b = tc.randn(6, 10), tc.randn(10)
h.close_to_eager(fp(a, b), f(a, b), "function with a dynamic input")
os.remove(fpath)
