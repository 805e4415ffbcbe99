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

-- an input the function does not read is still an input of the package, checked by its spec
local up, upath = h.round_trip(function(a, unused) return a * 2 end, {tc.randn(3), tc.randn(2, 2)})
h.eq(up:manifest().inputs[2].str, "float32[2, 2]", "unused input's spec")
h.close(up(tc.ones(3), tc.zeros(2, 2)), tc.full({3}, 2.0), "unused input", 0)
h.expect_error("package input 2 ('unused') is float32[3]", function() return up(tc.ones(3), tc.ones(3)) end)
os.remove(upath)

-- a two-level kernel (cross_entropy's mean: row logsumexps, then the mean over rows in one kernel)
-- round-trips through the package: its outer reductions and final code, at any batch size
local function xent(a)  -- (targets from the input itself: one dynamic dim)
  return tc.cross_entropy(a, tc.argmax(a * a:flip({2}), 2), nil, {label_smoothing = 0.1, ignore_index = 2})
end
local xp, xpath = h.round_trip(xent, {tc.randn(5, 7)}, {dynamic = {{1}}})
for _, n in ipairs({1, 6, 20000}) do
  local a = tc.randn(n, 7)
  h.close_to_eager(xp(a), xent(a), "cross_entropy, batch " .. n)
end
os.remove(xpath)

-- two inputs whose dynamic dims are equal in the example share one size (duck sizing): the package
-- runs any equal sizes, and refuses unequal ones with both inputs named
local function both(x, y) return (x - y) ^ 2 end
local bp, bpath = h.round_trip(both, {tc.randn(4, 3), tc.randn(4, 3)}, {dynamic = {{1}, {1}}})
for _, n in ipairs({2, 9, 33}) do
  local x, y = tc.randn(n, 3), tc.randn(n, 3)
  h.close_to_eager(bp(x, y), both(x, y), "shared batch " .. n)
end
h.expect_error("dim 1 of 'x' (6) and dim 1 of 'y' (5) must be equal", function() return bp(tc.randn(6, 3), tc.randn(5, 3)) end)
os.remove(bpath)

-- a bounded dynamic dim ({dim, min =, max =}, torch.export's Dim(min, max)): sizes in range run,
-- a size outside is refused naming the range
local rp, rpath = h.round_trip(function(x) return x * 3 end, {tc.randn(8, 2)}, {dynamic = {x = {{1, min = 4, max = 64}}}})
h.eq(rp:manifest().inputs[1].str, "float32[4..64, 2]", "a bounded input's spec")
for _, n in ipairs({4, 30, 64}) do
  local x = tc.randn(n, 2)
  h.close(rp(x), x * 3, "bounded batch " .. n)
end
h.expect_error("package input 1 ('x') is float32[65, 2]; the package takes float32[4..64, 2]", function() return rp(tc.randn(65, 2)) end)
h.expect_error("float32[3, 2]", function() return rp(tc.randn(3, 2)) end)
os.remove(rpath)
