-- Properties (shape, size, dim, numel, #, stride, dtype, device, requires_grad, grad) and the
-- 1-based dims and index values of LUA_API §2.
local tc = require "tc"
local check = require "check"
local T = {}

function T.size_and_shape()
  local x = tc.zeros(10, 10)
  check.eq(tostring(x.shape), "(10, 10)")
  check.eq(tostring(x:size()), "(10, 10)")
  check.eq(tostring(tc.zeros(3).shape), "(3,)")
  check.eq(tostring(tc.tensor(1).shape), "()")
  check.eq(x:size(1), 10)
  check.eq(tc.zeros(2, 3):size(-1), 3)
  check.eq(#x.shape, 2)
  check.eq(x.shape[1], 10)
  check.eq(x.shape == tc.Size({10, 10}), true)
  check.eq(x.shape == tc.Size({10, 9}), false)
  check.eq(tc.zeros(2, 3, 4):size():numel(), 24)
  check.raises("IndexError", function() return x:size(3) end)
  check.raises("IndexError", function() return x:size(0) end)
end

function T.dim_numel_len_stride()
  local x = tc.zeros(2, 3, 4)
  check.eq(x:dim(), 3)
  check.eq(x.ndim, 3)
  check.eq(x:numel(), 24)
  check.eq(#x, 2)
  check.eq(x:stride(1), 12)
  check.eq(x:stride(-1), 1)
  check.same(x:stride(), {12, 4, 1})
  check.eq(x:is_contiguous(), true)
  check.eq(x:transpose(1, 3):is_contiguous(), false)
  check.raises("ValueError", function() return #tc.tensor(1) end)
end

function T.requires_grad_and_grad()
  local x = tc.ones(2)
  check.eq(x.requires_grad, false)
  check.eq(x.grad, nil)
  check.eq(x.is_leaf, true)
  x.requires_grad = true
  check.eq(x.requires_grad, true)
  check.eq(rawequal(x:requires_grad_(false), x), true)
  check.eq(x.requires_grad, false)
  local g = tc.ones(2)
  x.grad = g
  check.eq(rawequal(x.grad, g), true, "grad is the same tensor object")
  x.grad = nil
  check.eq(x.grad, nil)
  check.raises("ShapeError", function() x.grad = tc.ones(3) end)
  check.raises("ValueError", function() x.foo = 1 end)
  check.eq(tc.randn(3, 3, {requires_grad = true}).requires_grad, true)
end

function T.dims_are_one_based()
  local x = tc.tensor({{1, 2, 3}, {4, 5, 6}})
  check.values(x:sum(1), {5, 7, 9})
  check.values(x:sum(2), {6, 15})
  check.values(x:sum(-1, {keepdim = true}), {{6}, {15}})
  check.values(x:sum({1, 2}), 21)
  check.values(x:sum(), 21)
  check.shape(x:transpose(1, 2), {3, 2})
  check.values(tc.cat({x, x}, 2), {{1, 2, 3, 1, 2, 3}, {4, 5, 6, 4, 5, 6}})
  check.shape(tc.stack({x, x}, 1), {2, 2, 3})
  check.values(x:float():softmax(-1):sum(-1), {1, 1}, 1e-6)
  check.shape(x:unsqueeze(1), {1, 2, 3})
  check.raises("IndexError", function() return x:sum(3) end)
  check.raises("IndexError", function() return x:sum(0) end)
end

function T.index_values_are_one_based()
  local x = tc.tensor({{1.0, 9.0, 3.0}, {7.0, 5.0, 6.0}})
  check.values(x:argmax(2), {2, 1})
  check.values(x:argmin(1), {1, 2, 1})
  check.values(x:argmax(), 2, 0, "flat argmax")
  local values, indices = x:max(2)
  check.values(values, {9, 7})
  check.values(indices, {2, 1})
  local v2, i2 = x:min(1)
  check.values(v2, {1, 5, 3})
  check.values(i2, {1, 2, 1})
  local s, si = x:sort(2)
  check.values(s, {{1, 3, 9}, {5, 6, 7}})
  check.values(si, {{1, 3, 2}, {2, 3, 1}})
  local tv, ti = x:topk(1, 2)
  check.values(tv, {{9}, {7}})
  check.values(ti, {{2}, {1}})
  check.values(x:gather(2, tc.tensor({{3}, {1}})), {{3}, {7}})
  check.values(x:index_select(2, tc.tensor({3, 1})), {{3, 1}, {6, 7}})
  check.raises("IndexError", function() return x:index_select(2, tc.tensor({0})) end)
end

function T.max_min_forms()
  local x = tc.tensor({{1, 5}, {7, 2}})
  check.values(x:max(), 7)
  check.values(x:min(), 1)
  check.values(x:max(tc.tensor({{3, 3}, {3, 3}})), {{3, 5}, {7, 3}})
  check.values(tc.max(x, 1), {7, 5})
  local v, i = x:max(1, {keepdim = true})
  check.shape(v, {1, 2})
  check.values(i, {{2, 1}})
end

function T.several_results()
  local x = tc.arange(6):view(2, 3)
  local parts = x:split(2, 2)
  check.eq(#parts, 2)
  check.values(parts[2], {{2}, {5}})
  local p2 = x:split({1, 2}, 2)
  check.shape(p2[2], {2, 2})
  check.eq(#x:chunk(3, 2), 3)
  local rows = x:unbind(1)
  check.eq(#rows, 2)
  check.values(rows[2], {3, 4, 5})
  local var, mean = tc.tensor({1.0, 2.0, 3.0}):var_mean()
  check.values(var, 1)
  check.values(mean, 2)
end

return T
