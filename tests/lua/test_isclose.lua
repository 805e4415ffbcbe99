-- tc.isclose / tc.allclose (and the methods x:isclose, x:allclose) with torch.isclose's semantics.
-- The expected values are what torch 1.13 prints for the same calls.
local tc = require "tc"
local check = require "check"

local nan, inf = 0 / 0, math.huge
local T = {}

local function bools(t) return t:tolist() end

function T.infinities_equal_only_themselves_and_nan_needs_equal_nan()
  local a = tc.tensor {1.0, nan, inf, -inf, inf}
  local b = tc.tensor {1.0, nan, inf, inf, 1e38}
  check.same(bools(tc.isclose(a, b)), {true, false, true, false, false})
  check.same(bools(tc.isclose(a, b, {equal_nan = true})), {true, true, true, false, false})
  check.same(bools(a:isclose(b, 1e-5, 1e-8, true)), {true, true, true, false, false})
end

function T.tolerance_is_atol_plus_rtol_times_abs_other()
  local a = tc.tensor {1.0, 1.0, 100.0, 0.0}
  local b = tc.tensor {1.1, 1.3, 101.0, -1e-9}
  check.same(bools(tc.isclose(a, b, 0.1, 0.05)), {true, false, true, true})
  check.same(bools(tc.isclose(a, b, {atol = 0.2})), {true, false, false, true})
  check.same(bools(tc.isclose(a, b, 0.01, {atol = 0})), {false, false, true, false})
  -- rtol = atol = 0 is equality
  check.same(bools(tc.isclose(a, b, 0, 0)), {false, false, false, false})
  -- the default tolerances: 1e-5 relative
  check.same(bools(tc.isclose(tc.tensor {1.0, 1.0}, tc.tensor {1.000001, 1.0001})), {true, false})
end

function T.broadcasts()
  local r = tc.isclose(tc.tensor {{1.0}, {2.0}}, tc.tensor {1.0, 2.000001})
  check.shape(r, {2, 2})
  check.eq(r.dtype, tc.bool)
  check.same(bools(r), {{true, false}, {false, true}})
end

function T.integer_bool_and_half_follow_pytorch()
  check.same(bools(tc.isclose(tc.tensor {1, 2}, tc.tensor {1, 3})), {true, false})
  check.same(bools(tc.isclose(tc.tensor {10, 20}, tc.tensor {11, 21}, 0.05, 0)), {false, true})
  check.same(bools(tc.isclose(tc.tensor {true, false}, tc.tensor {true, true})), {true, false})
  check.same(bools(tc.isclose(tc.tensor {true}, tc.tensor {false}, {atol = 2})), {true})
  -- uint8 differences wrap, as in PyTorch
  check.same(bools(tc.isclose(tc.tensor({200}, {dtype = tc.uint8}), tc.tensor({0}, {dtype = tc.uint8}), {atol = 1})), {false})
  local h = tc.tensor({1.0}, {dtype = tc.float16})
  check.same(bools(tc.isclose(h, tc.tensor({1.0009765625}, {dtype = tc.float16}))), {false})
end

function T.allclose_is_a_lua_boolean()
  check.eq(tc.allclose(tc.ones(3), tc.ones(3) + 1e-7), true)
  check.eq(tc.ones(3):allclose(tc.ones(3) + 1e-3), false)
  check.eq(tc.ones(2):allclose(tc.ones(2) + 1e-3, 1e-2), true)
  check.eq(tc.allclose(tc.tensor {nan}, tc.tensor {nan}), false)
  check.eq(tc.allclose(tc.tensor {nan}, tc.tensor {nan}, {equal_nan = true}), true)
  check.eq(tc.allclose(tc.zeros(2, 3), tc.zeros(3)), true)
end

function T.wrong_arguments_are_errors_at_the_callers_line()
  local line = check.line() + 1
  local e = check.raises("DTypeError", function() return tc.isclose(tc.tensor {1.0}, tc.tensor {1}) end)
  check.eq(e.line, line)
  assert(e.message:find("float32 did not match int64", 1, true), e.message)
  e = check.raises("ValueError", function() return tc.isclose(tc.ones(1), tc.ones(1), -1) end)
  assert(e.message:find("rtol", 1, true), e.message)
  e = check.raises("ValueError", function() return tc.allclose(tc.ones(1), tc.ones(1), {atol = -1}) end)
  assert(e.message:find("allclose(): argument 'atol'", 1, true), e.message)
  e = check.raises("ValueError", function() return tc.isclose(tc.ones(1), 1.0) end)
  assert(e.message:find("other", 1, true), e.message)
  e = check.raises("ValueError", function() return tc.isclose(tc.ones(1), tc.ones(1), {rtl = 1}) end)
  assert(e.message:find("rtl", 1, true), e.message)
  check.raises("ShapeError", function() return tc.isclose(tc.ones(2), tc.ones(3)) end)
end

function T.isclose_compiles_into_one_graph()
  if tc._C.host() == nil then
    check.skip("stock lua5.4 has no compilation")
  end
  local function f(a, b) return tc.isclose(a, b, 1e-3, {equal_nan = true}) end
  local a, b = tc.randn(4, 3), tc.randn(3)
  local report = tc.compiler.explain(f)(a, b)
  check.eq(report.graph_count, 1)
  check.eq(report.graph_break_count, 0)
  local cf = tc.compile(f, {fullgraph = true})
  check.same(bools(cf(a, b)), bools(f(a, b)))
  local near = a + 1e-4
  check.same(bools(cf(a, near)), bools(f(a, near)))
end

return T
