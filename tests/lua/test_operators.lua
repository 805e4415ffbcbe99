-- Operators + - * / % ^ // and unary minus, elementwise with broadcasting, with Lua numbers on
-- either side; comparisons < <= == on one-element tensors; matrix products as methods.
local tc = require "tc"
local check = require "check"
local T = {}

function T.arithmetic_with_tensors()
  local a = tc.tensor({{1.0, 2.0}, {3.0, 4.0}})
  local b = tc.tensor({10.0, 20.0})  -- broadcasts over rows
  check.values(a + b, {{11, 22}, {13, 24}})
  check.values(a - b, {{-9, -18}, {-7, -16}})
  check.values(a * b, {{10, 40}, {30, 80}})
  check.values(b / a, {{10, 10}, {10 / 3, 5}})
  check.values(a ^ 2, {{1, 4}, {9, 16}})
  check.values(-a, {{-1, -2}, {-3, -4}})
end

function T.numbers_on_either_side()
  local x = tc.tensor({1.0, 2.0, 4.0})
  check.values(2 - x, {1, 0, -2})
  check.values(x - 2, {-1, 0, 2})
  check.values(1 / x, {1, 0.5, 0.25})
  check.values(x / 2, {0.5, 1, 2})
  check.values(3 * x, {3, 6, 12})
  check.values(x + 0.5, {1.5, 2.5, 4.5})
  check.values(2 ^ x, {2, 4, 16})
  check.values(10 % x, {0, 0, 2})
end

function T.keyword_arguments_in_options_tables()
  local a, b = tc.tensor({1.0, 2.0}), tc.tensor({10.0, 20.0})
  check.values(a:add(b, {alpha = 2}), {21, 42})
  check.values(tc.sub(2, a), {1, 0})
  check.values(a:div(tc.tensor({-3.0, 3.0}), {rounding_mode = "floor"}), {-1, 0})
  check.values(a:div(tc.tensor({-3.0, 3.0}), {rounding_mode = "trunc"}), {-0.0, 0})
end

function T.floor_division_and_remainder_follow_python()
  local x = tc.tensor({-7, 7})
  check.values(x // 2, {-4, 3})
  check.eq((x // 2).dtype, tc.int64)
  check.values(x % 3, {2, 1}, 0, "remainder has the sign of the divisor")
  check.values(tc.tensor({-7.5, 7.5}) // 2, {-4, 3})
end

function T.bitwise_operators_on_integers()
  local x = tc.tensor({12, 10})
  check.values(x & 6, {4, 2})
  check.values(x | 1, {13, 11})
  check.values(x ~ 15, {3, 5})
  check.values(~tc.tensor({0, -1}), {-1, 0})
end

function T.comparisons_on_one_element_tensors()
  local one, two = tc.tensor(1.0), tc.tensor({2.0})
  check.eq(one < two, true)
  check.eq(two <= one, false)
  check.eq(one < 1.5, true)
  check.eq(0 < one, true)
  check.eq(one == tc.tensor(1), true)
  check.eq(one == two, false)
  check.raises("ValueError", function() return tc.ones(2) < tc.ones(2) end)
  check.raises("ValueError", function() return tc.ones(2) < 1 end)
end

function T.comparison_methods_give_masks()
  local x = tc.tensor({1, 2, 3})
  check.values(x:eq(2), {false, true, false})
  check.values(x:ne(2), {true, false, true})
  check.values(x:lt(2), {true, false, false})
  check.values(x:le(2), {true, true, false})
  check.values(x:gt(2), {false, false, true})
  check.values(x:ge(tc.tensor({3, 2, 1})), {false, true, true})
end

function T.matrix_products()
  local a = tc.tensor({{1.0, 2.0}, {3.0, 4.0}})
  local b = tc.tensor({{5.0}, {6.0}})
  check.values(a:matmul(b), {{17}, {39}})
  check.values(tc.matmul(a, b), {{17}, {39}})
  check.values(a:mm(b), {{17}, {39}})
  check.values(tc.stack({a, a}):bmm(tc.stack({b, b}))[2], {{17}, {39}})
  check.raises("ShapeError", function() return a:mm(tc.ones(3, 1)) end)
end

function T.broadcast_mismatch_is_a_shape_error()
  check.raises("ShapeError", function() return tc.ones(2, 3) + tc.ones(4) end)
end

return T
