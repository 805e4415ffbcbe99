-- Creation forms of LUA_API §2: tc.tensor from nested tables, constructors with sizes as varargs
-- or a table, options tables, *_like, and bad input.
local tc = require "tc"
local check = require "check"
local T = {}

function T.tensor_from_nested_tables_infers_dtype()
  local a = tc.tensor({{1, 2}, {3, 4}})
  check.eq(a.dtype, tc.int64)
  check.shape(a, {2, 2})
  check.same(a:tolist(), {{1, 2}, {3, 4}})
  check.eq(tc.tensor({1, 2.5}).dtype, tc.float32, "any float")
  check.eq(tc.tensor({true, false}).dtype, tc.bool, "booleans")
  check.eq(tc.tensor(3).dtype, tc.int64, "a number")
  check.eq(tc.tensor(3).shape:numel(), 1)
  check.eq(tc.tensor(3):dim(), 0)
  check.eq(tc.tensor({}).dtype, tc.float32, "empty")
  check.shape(tc.tensor({}), {0})
  check.shape(tc.tensor({{{1}}, {{2}}}), {2, 1, 1})
end

function T.tensor_options_table()
  local a = tc.tensor({1, 2}, {dtype = tc.float64})
  check.eq(a.dtype, tc.float64)
  check.same(a:tolist(), {1.0, 2.0})
  check.eq(tc.tensor({1.7, -1.7}, {dtype = "int32"}).dtype, tc.int32, "dtype as a string")
  check.same(tc.tensor({1.7, -1.7}, {dtype = tc.int64}):tolist(), {1, -1}, "floats truncate to ints")
  check.eq(tc.tensor({1.0}, {requires_grad = true}).requires_grad, true)
  check.raises("DTypeError", function() return tc.tensor({1}, {requires_grad = true}) end)
  check.raises("ValueError", function() return tc.tensor({1}, {dtyp = tc.float32}) end)
end

function T.tensor_of_a_tensor_copies()
  local a = tc.tensor({1.0, 2.0})
  local b = tc.tensor(a)
  b[1] = 5
  check.same(a:tolist(), {1.0, 2.0})
  check.eq(tc.tensor(a, {dtype = tc.int64}).dtype, tc.int64)
end

function T.ragged_tables_are_shape_errors()
  check.raises("ShapeError", function() return tc.tensor({{1, 2}, {3}}) end)
  check.raises("ShapeError", function() return tc.tensor({{1, 2}, 3}) end)
  check.raises("ShapeError", function() return tc.tensor({1, {2}}) end)
  check.raises("ValueError", function() return tc.tensor({"a"}) end)
end

function T.zeros_ones_full_empty()
  check.values(tc.zeros(2, 3), {{0, 0, 0}, {0, 0, 0}})
  check.shape(tc.zeros({2, 3}), {2, 3}, "sizes as a table")
  check.shape(tc.zeros(tc.Size({4})), {4}, "sizes as a tc.Size")
  check.values(tc.ones(2), {1, 1})
  check.eq(tc.ones(2).dtype, tc.float32)
  check.values(tc.full({2, 2}, 7), {{7, 7}, {7, 7}})
  check.shape(tc.empty(3, 4), {3, 4})
  local h = tc.zeros(3, 4, {dtype = tc.float16})
  check.eq(h.dtype, tc.float16)
  check.eq(tc.ones(2, {dtype = tc.int32}).dtype, tc.int32)
end

function T.eye_arange_linspace()
  check.values(tc.eye(2), {{1, 0}, {0, 1}})
  check.values(tc.arange(5), {0, 1, 2, 3, 4})
  check.eq(tc.arange(5).dtype, tc.int64)
  check.values(tc.arange(0, 10, 3), {0, 3, 6, 9}, 0, "end exclusive, step")
  check.values(tc.arange(1, 2.5, 0.5), {1, 1.5, 2})
  check.eq(tc.arange(1, 2.5, 0.5).dtype, tc.float32)
  check.eq(tc.arange(4, {dtype = tc.float64}).dtype, tc.float64)
  check.values(tc.linspace(0, 1, 5), {0, 0.25, 0.5, 0.75, 1})
end

function T.random_constructors()
  local r = tc.rand(100)
  check.shape(r, {100})
  check.eq(r:min():item() >= 0 and r:max():item() < 1, true, "rand in [0, 1)")
  check.shape(tc.randn(3, 4), {3, 4})
  local i = tc.randint(2, 5, {50})
  check.eq(i.dtype, tc.int64)
  check.eq(i:min():item() >= 2 and i:max():item() < 5, true, "randint in [lo, hi)")
  check.shape(tc.randint(3, {2, 2}), {2, 2})
end

function T.manual_seed_repeats_streams()
  if not tc.manual_seed then error("tc.manual_seed is missing") end
  tc.manual_seed(7)
  local a = tc.randn(5):tolist()
  tc.manual_seed(7)
  check.same(tc.randn(5):tolist(), a)
end

function T.like_constructors()
  local x = tc.ones(2, 3, {dtype = tc.float64})
  local z = tc.zeros_like(x)
  check.eq(z.dtype, tc.float64)
  check.shape(z, {2, 3})
  check.values(tc.ones_like(x), {{1, 1, 1}, {1, 1, 1}})
  check.eq(tc.zeros_like(x, {dtype = tc.int32}).dtype, tc.int32)
  check.values(tc.full_like(x, 2), {{2, 2, 2}, {2, 2, 2}})
  check.shape(tc.empty_like(x), {2, 3})
  check.shape(tc.rand_like(x), {2, 3})
  check.eq(tc.randn_like(x).dtype, tc.float64)
end

function T.bad_sizes()
  check.raises("ShapeError", function() return tc.zeros(-1, 2) end)
  check.raises("ValueError", function() return tc.zeros(2, {dtype = tc.float32, bogus = 1}) end)
end

return T
