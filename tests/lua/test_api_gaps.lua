-- The small API gaps a PyTorch user hit (issue 32): inference_mode, the no_grad wrapper form,
-- Module:requires_grad_ / bfloat16 / register_full_backward_hook, set_stance as a <close> guard,
-- tc.equal, tc.randperm, index_add(_), index_fill(_), repeat_interleave, new_*, x.mT,
-- tc.set_printoptions, tc.where(cond), index tensors in any dim, tc.compile(mod)._orig_mod.
-- Values are PyTorch 1.13's (api_gaps_cases.lua, from gen_api_gaps_cases.py), with index values
-- 1-based as tc's are; tensor ops are also checked compiled against eager.
local tc = require "tc"
local nn = require "tc.nn"
local check = require "check"
local cases = require "api_gaps_cases"
local T = {}

local compiling = tc._C.host() ~= nil
local x = tc.arange(12.):view(3, 4)
local w = tc.arange(12.):view(3, 4) / 10
local y = tc.arange(24.):view(2, 3, 4)

-- f compiled equals f eager; with fullgraph, the whole of f is one graph.
local function same_compiled(f, fullgraph, ...)
  if not compiling then return end
  local want = table.pack(f(...))
  local got = table.pack(tc.compile(f, {fullgraph = fullgraph})(...))
  check.eq(got.n, want.n, "result count")
  for i = 1, want.n do
    if tc.is_tensor(want[i]) then check.values(got[i], want[i]:tolist(), 1e-6, "compiled result " .. i) else check.same(got[i], want[i]) end
  end
end

-- ---- grad modes ---------------------------------------------------------------------------------
function T.inference_mode_call_and_close_forms_disable_grad()
  local p = tc.ones(2, {dtype = tc.float32, requires_grad = true})
  local r, extra = tc.inference_mode(function(a, b)
    check.eq(tc.is_grad_enabled(), false)
    return a * 2, b
  end, p, 7)
  check.eq(r.requires_grad, false)
  check.eq(extra, 7)
  check.eq(tc.is_grad_enabled(), true)
  do
    local _ <close> = tc.inference_mode()
    check.eq(tc.is_grad_enabled(), false)
    check.eq((p * 2).requires_grad, false)
  end
  check.eq(tc.is_grad_enabled(), true)
  check.eq(tc.is_inference_mode_enabled(), false)
  do
    local _ <close> = tc.inference_mode()
    check.eq(tc.is_inference_mode_enabled(), true)
    do
      local _ <close> = tc.inference_mode(false)  -- as torch: grad mode on, inference mode off
      check.eq(tc.is_grad_enabled(), true)
      check.eq(tc.is_inference_mode_enabled(), false)
    end
    check.eq(tc.is_grad_enabled(), false)
    check.eq(tc.is_inference_mode_enabled(), true)
  end
  check.eq(tc.is_inference_mode_enabled(), false)
  do
    local _ <close> = tc.no_grad()
    local _ <close> = tc.inference_mode(false)
    check.eq(tc.is_grad_enabled(), true)
  end
  check.eq(tc.inference_mode(tc.is_inference_mode_enabled), true, "call form")
  local ok = pcall(tc.inference_mode, function() error("boom") end)
  check.eq(ok, false)
  check.eq(tc.is_grad_enabled(), true, "restored after an error")
  local cf = function(a)
    local _ <close> = tc.inference_mode()
    return a * 3
  end
  same_compiled(cf, false, p)
  if compiling then check.eq(tc.compile(cf)(p).requires_grad, false) end
end

function T.no_grad_fn_wraps_for_a_later_call_with_arguments()
  local p = tc.ones(2, {dtype = tc.float32, requires_grad = true})
  local calls = 0
  local f = tc.no_grad_fn(function(a, k)
    calls = calls + 1
    check.eq(tc.is_grad_enabled(), false)
    return a * k, k
  end)
  check.eq(calls, 0, "wrapping does not call")
  local r, k = f(p, 3)
  check.eq(calls, 1)
  check.eq(k, 3)
  check.values(r, {3, 3})
  check.eq(r.requires_grad, false)
  check.eq(tc.is_grad_enabled(), true)
  -- the call form is unchanged: runs at once with no arguments
  local ran = false
  tc.no_grad(function(...) ran = select("#", ...) == 0 end)
  check.eq(ran, true)
  local e = tc.enable_grad_fn(function(a) return tc.is_grad_enabled(), a end)
  do
    local _ <close> = tc.no_grad()
    check.same({e(5)}, {true, 5})
  end
  check.same({tc.inference_mode_fn(function() return tc.is_grad_enabled(), tc.is_inference_mode_enabled() end)()}, {false, true})
  check.raises("ValueError", tc.no_grad_fn, 42)
end

-- ---- modules ------------------------------------------------------------------------------------
function T.module_requires_grad_freezes_and_unfreezes_every_parameter()
  local m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
  check.eq(m:requires_grad_(false), m)
  for _, p in ipairs(m:parameters()) do check.eq(p.requires_grad, false) end
  local out = m(tc.randn(2, 3))
  check.eq(out.requires_grad, false)
  m:requires_grad_()
  for _, p in ipairs(m:parameters()) do check.eq(p.requires_grad, true) end
  check.raises("ValueError", function() m:requires_grad_("no") end)
end

function T.module_bfloat16_half_float_double_convert_floating_tensors()
  local m = nn.Linear(3, 2)
  m:register_buffer("steps", tc.zeros(1, {dtype = tc.int64}))
  check.eq(m:bfloat16(), m)
  check.eq(m.weight.dtype, tc.bfloat16)
  check.eq(m.steps.dtype, tc.int64)
  check.eq(m(tc.randn(4, 3, {dtype = tc.bfloat16})).dtype, tc.bfloat16)
  m:half()
  check.eq(m.bias.dtype, tc.float16)
  m:double()
  check.eq(m.weight.dtype, tc.float64)
  m:float()
  check.eq(m.weight.dtype, tc.float32)
  check.eq(m.weight.requires_grad, true)
end

local Lin = nn.Module:extend("Lin")
function Lin:__init() self.weight = nn.Parameter(tc.tensor {{1, -2, 0.5}, {0.25, 1, -1}}) end
function Lin:forward(a) return a:matmul(self.weight:t()) end

function T.full_backward_hook_sees_grads_and_replaces_grad_input()
  local m = Lin()
  local seen = {}
  local h = m:register_full_backward_hook(function(mod, gi, go)
    check.eq(mod, m)
    seen.gi, seen.go = gi[1]:clone(), go[1]:clone()
    return {gi[1] * 3}
  end)
  local a = tc.tensor({{1, 2, 3}, {-1, 0, 2}}, {dtype = tc.float32, requires_grad = true})
  ;(m(a) * tc.tensor {{1, 2}, {3, 4}}):sum():backward()
  check.values(seen.gi, cases.hook_grad_input)
  check.values(seen.go, cases.hook_grad_output)
  check.values(a.grad, cases.hook_x_grad)
  check.values(m.weight.grad, cases.hook_weight_grad)
  h.remove()
  a.grad, seen.gi = nil, nil
  ;(m(a) * tc.tensor {{1, 2}, {3, 4}}):sum():backward()
  check.eq(seen.gi, nil, "removed hook")
  check.values(a.grad, cases.hook_grad_input)
end

local Two = nn.Module:extend("Two")
function Two:forward(a, k, b) return a * b + a, b:sum() end

function T.full_backward_hook_with_several_inputs_and_outputs()
  local m = Two()
  local seen = {}
  m:register_full_backward_hook(function(_, gi, go)
    seen.gi1, seen.gi2, seen.gi3 = gi[1]:clone(), gi[2], gi[3]:clone()
    seen.go1, seen.go2 = go[1]:clone(), go[2]:clone()
    return {gi[1] * 0 + 1, nil, gi[3]}
  end)
  local a = tc.tensor({1, 2, 3}, {dtype = tc.float32, requires_grad = true})
  local b = tc.tensor({4, 5, 6}, {dtype = tc.float32, requires_grad = true})
  local o1, o2 = m(a, tc.tensor {0.0}, b)
  ;(o1 * tc.tensor {1, 2, 3} + o2 * 2):sum():backward()
  check.values(seen.gi1, cases.hook2_gi1)
  check.eq(seen.gi2, nil, "no gradient for an argument that does not require grad")
  check.values(seen.gi3, cases.hook2_gi3)
  check.values(seen.go1, cases.hook2_go1)
  check.values(seen.go2, cases.hook2_go2)
  check.values(a.grad, cases.hook2_a_grad)
  check.values(b.grad, cases.hook2_b_grad)
end

function T.full_backward_hook_without_inputs_that_require_grad_runs_once()
  local m = nn.Linear(3, 2)
  local calls, gi_count, go = 0, -1, nil
  m:register_full_backward_hook(function(_, gi, g)
    calls, gi_count, go = calls + 1, #gi, g[1]
  end)
  m(tc.randn(4, 3)):sum():backward()
  check.eq(calls, 1)
  check.eq(gi_count, 0, "grad_input all nil")
  check.values(go, tc.ones(4, 2):tolist())
  check.raises("ValueError", function() m:register_full_backward_hook(3) end)
  -- no hooks under no_grad
  do
    local _ <close> = tc.no_grad()
    check.eq(m(tc.randn(1, 3)).requires_grad, false)
  end
end

function T.full_backward_hook_under_compile_equals_eager()
  if not compiling then return end
  local function run(compiled)
    local m = Lin()
    local got
    m:register_full_backward_hook(function(_, gi) got = gi[1]:clone(); return {gi[1] * 2} end)
    local f = function(a) return (m(a) * 2):sum() end
    if compiled then f = tc.compile(f) end
    local a = tc.tensor({{1, 2, 3}, {-1, 0, 2}}, {dtype = tc.float32, requires_grad = true})
    f(a):backward()
    return got, a.grad, m.weight.grad
  end
  local g1, a1, w1 = run(false)
  local g2, a2, w2 = run(true)
  check.values(g2, g1:tolist())
  check.values(a2, a1:tolist())
  check.values(w2, w1:tolist())
end

-- ---- compiler -----------------------------------------------------------------------------------
function T.set_stance_returns_a_guard_that_restores_the_stance()
  check.eq(tc.compiler.stance, "default")
  do
    local _ <close> = tc.compiler.set_stance("force_eager")
    check.eq(tc.compiler.stance, "force_eager")
    do
      local _ <close> = tc.compiler.set_stance("eager_on_recompile")
      check.eq(tc.compiler.stance, "eager_on_recompile")
    end
    check.eq(tc.compiler.stance, "force_eager")
  end
  check.eq(tc.compiler.stance, "default")
  local ok = pcall(function()
    local _ <close> = tc.compiler.set_stance("force_eager")
    error("inside")
  end)
  check.eq(ok, false)
  check.eq(tc.compiler.stance, "default", "restored after an error")
  check.raises("ValueError", tc.compiler.set_stance, "fast")
  if not compiling then return end
  local f = tc.compile(function(a) return a * 2 + 1 end)
  local before = tc.compiler.stats().traces
  do
    local _ <close> = tc.compiler.set_stance("force_eager")
    check.values(f(tc.ones(3)), {3, 3, 3})
    check.eq(tc.compiler.stats().traces, before, "force_eager inside the block")
  end
  check.values(f(tc.ones(3)), {3, 3, 3})
  check.eq(tc.compiler.stats().traces, before + 1, "compiles after the block")
end

function T.compiled_module_has_orig_mod()
  local m = nn.Linear(2, 2)
  local cm = tc.compile(m)
  if not compiling then return end
  check.eq(rawequal(cm._orig_mod, m), true)
  check.eq(cm._orig_mod.weight, m.weight)
end

-- ---- tensor ops ---------------------------------------------------------------------------------
function T.equal_compares_shape_and_values()
  check.eq(tc.equal(x, x:clone()), true)
  check.eq(tc.equal(x, x + 1), false)
  check.eq(tc.equal(tc.tensor {1, 2}, tc.tensor {{1, 2}}), false, "shapes differ")
  check.eq(tc.equal(tc.tensor {1, 2}, tc.tensor {1.0, 2.0}), true, "promoted as torch.equal")
  check.eq(x:equal(x), true)
  check.raises("ValueError", tc.equal, x, 3)
end

function T.randperm_is_a_permutation_of_1_to_n()
  tc.manual_seed(5)
  local p = tc.randperm(50)
  check.eq(p.dtype, tc.int64)
  check.shape(p, {50})
  local sorted = p:sort()
  check.values(sorted, tc.arange(1, 51):tolist())
  tc.manual_seed(5)
  check.values(tc.randperm(50), p:tolist(), 0, "seeded")
  check.eq(tc.randperm(4, {dtype = tc.int32}).dtype, tc.int32)
  check.shape(tc.randperm(0), {0})
  check.raises("ValueError", tc.randperm, -1)
  check.raises("ValueError", tc.randperm, 3, {dtyp = tc.int32})
  if compiling then
    local got = tc.compile(function(n) return tc.randperm(n):sort() end)(10)
    check.values(got, tc.arange(1, 11):tolist())
  end
end

function T.index_add_matches_torch_with_gradients()
  local xs = x:clone():requires_grad_()
  local src = (tc.arange(9.):view(3, 3) - 4):requires_grad_()
  local r = xs:index_add(2, tc.tensor {1, 4, 1}, src, 2)
  check.values(r, cases.index_add_dim2)
  ;(r * w):sum():backward()
  check.values(xs.grad, cases.index_add_dim2_grad_self)
  check.values(src.grad, cases.index_add_dim2_grad_source)
  check.values(tc.index_add(x, 1, tc.tensor {3, 1}, tc.ones(2, 4)), cases.index_add_dim1)
  local z = x:clone()
  check.eq(z:index_add_(-1, tc.tensor {1, 4, 1}, tc.arange(9.):view(3, 3) - 4, {alpha = 2}), z)
  check.values(z, cases.index_add_dim2)
  check.raises("ShapeError", function() return x:index_add(2, tc.tensor {1, 2}, tc.ones(3, 3)) end)
  check.raises("IndexError", function() return x:index_add(3, tc.tensor {1}, tc.ones(3, 1)) end)
  check.raises("IndexError", function() return x:index_add(1, tc.tensor {1.0}, tc.ones(1, 4)) end)
  local ints = tc.zeros(3, {dtype = tc.int64})
  check.values(ints:index_add(1, tc.tensor {3, 3}, tc.tensor {1, 2}, 2), {0, 0, 6}, 0, "integer alpha")
  check.raises("ValueError", function() return ints:index_add(1, tc.tensor {1}, tc.tensor {1}, 0.5) end)
  check.raises("ValueError", function() return x:clone():requires_grad_():index_add_(1, tc.tensor {1}, tc.ones(1, 4)) end)
  same_compiled(function(a, i, s) return a:index_add(2, i, s, {alpha = 2}) end, true, x, tc.tensor {1, 4, 1}, tc.ones(3, 3))
end

function T.index_fill_matches_torch_with_gradients()
  local xs = x:clone():requires_grad_()
  local r = xs:index_fill(2, tc.tensor {1, 3}, -1.5)
  check.values(r, cases.index_fill_dim2)
  ;(r * w):sum():backward()
  check.values(xs.grad, cases.index_fill_dim2_grad)
  check.values(x:index_fill(1, tc.tensor {2}, tc.tensor(7.0)), cases.index_fill_dim1)
  local z = x:clone()
  z:index_fill_(2, tc.tensor {1, 3}, -1.5)
  check.values(z, cases.index_fill_dim2)
  check.raises("ValueError", function() return x:index_fill(1, tc.tensor {1}, tc.ones(2)) end)
  same_compiled(function(a, i) return a:index_fill(2, i, -1.5) end, true, x, tc.tensor {1, 3})
end

function T.repeat_interleave_matches_torch_with_gradients()
  local a = tc.arange(6):view(2, 3)
  check.values(a:repeat_interleave(2), cases.repeat_interleave_flat)
  check.values(a:repeat_interleave(2, 2), cases.repeat_interleave_dim2)
  check.values(a:repeat_interleave(tc.tensor {1, 0, 2}, 2), cases.repeat_interleave_tensor_dim2)
  check.values(tc.repeat_interleave(a, tc.tensor {2, 1}, {dim = 1}), cases.repeat_interleave_tensor_dim1)
  check.values(tc.repeat_interleave(tc.tensor {1, 0, 2}), cases.repeat_interleave_counts)
  check.values(tc.tensor(5):repeat_interleave(3), {5, 5, 5})
  local af = tc.arange(6.):view(2, 3):requires_grad_()
  ;(af:repeat_interleave(tc.tensor {1, 0, 2}, 2) * tc.arange(6.):view(2, 3)):sum():backward()
  check.values(af.grad, cases.repeat_interleave_tensor_grad)
  af.grad = nil
  ;(af:repeat_interleave(2, 1) * tc.arange(12.):view(4, 3)):sum():backward()
  check.values(af.grad, cases.repeat_interleave_int_grad)
  check.raises("ValueError", function() return a:repeat_interleave(-1) end)
  check.raises("ShapeError", function() return a:repeat_interleave(tc.tensor {1, 2}, 2) end)
  check.raises("ValueError", function() return a:repeat_interleave(2, 1, {output_size = 3}) end)
  same_compiled(function(t) return t:repeat_interleave(3, -1) end, true, a)
  same_compiled(function(t, r) return t:repeat_interleave(r, 2) * 2 end, false, a, tc.tensor {1, 0, 2})
end

function T.new_zeros_ones_full_empty_tensor_take_dtype_and_device_of_self()
  local h = tc.ones(2, {dtype = tc.float64})
  local z = h:new_zeros(2, 3)
  check.eq(z.dtype, tc.float64)
  check.shape(z, {2, 3})
  check.values(z, {{0, 0, 0}, {0, 0, 0}})
  check.shape(h:new_ones({4}), {4})
  check.values(h:new_ones({2}), {1, 1})
  local f = h:new_full({2}, 3.5, {dtype = tc.float32})
  check.eq(f.dtype, tc.float32)
  check.values(f, {3.5, 3.5})
  check.shape(h:new_empty(3, 1), {3, 1})
  local i = tc.ones(1, {dtype = tc.int32}):new_tensor {1, 2}
  check.eq(i.dtype, tc.int32)
  check.values(i, {1, 2})
  check.eq(tc.ones(2, {dtype = tc.int32}):new_zeros(2, 3).dtype, tc.int32)
  same_compiled(function(t) return t:new_zeros(2, 2) + t:new_ones({2, 2}) + t:new_full({2, 2}, 2) end, true, h)
end

function T.mT_transposes_the_last_two_dims()
  local b = tc.randn(2, 3, 4)
  check.shape(b.mT, {2, 4, 3})
  check.values(b.mT, b:transpose(-2, -1):tolist())
  check.values(x.mT, x:t():tolist())
  check.raises("ValueError", function() return tc.ones(3).mT end)
  same_compiled(function(t) return t.mT * 2 end, true, b)
end

function T.where_with_one_argument_gives_1_based_indices_per_dim()
  local cond = tc.tensor {{true, false, true}, {false, true, false}}
  local idx = tc.where(cond)
  check.eq(#idx, 2)
  check.values(idx[1], cases.where_cond[1])
  check.values(idx[2], cases.where_cond[2])
  check.values(tc.tensor({5, 6, 7, 8}):view(2, 2)[{ {}, 1 }], {5, 7})
  local picked = tc.arange(6):view(2, 3)
  check.values(tc.where(tc.tensor(true))[1], {1})
  check.shape(tc.where(tc.zeros(3):gt(1))[1], {0})
  check.values(tc.where(cond, picked, -picked), {{0, -1, 2}, {-3, 4, -5}}, 0, "three-argument form unchanged")
  same_compiled(function(c) return tc.where(c)[2] * 2 end, false, cond)
end

-- ---- indexing with an index tensor in any dim ---------------------------------------------------
function T.index_tensor_in_a_later_dim_reads_like_torch()
  check.values(y[{ {}, tc.tensor {3, 1} }], cases.get_dim2)
  check.values(y[{ 1, {}, tc.tensor {{2, 3}, {4, 4}} }], cases.get_int_then_dim3)
  check.values(y[{ {}, 2, tc.tensor {1, 4} }], cases.get_dim3_after_int)
  check.values(y[{ {}, tc.tensor {1, 3}, 2 }], cases.get_dim2_then_int)
  check.values(y[{ {}, {2, 3}, tc.tensor {4, 1} }], cases.get_range_then_dim3)
  local yg = y:clone():requires_grad_()
  ;(yg[{ {}, tc.tensor {3, 1, 3} }] * tc.arange(24.):view(2, 3, 4)):sum():backward()
  check.values(yg.grad, cases.get_dim2_grad)
  check.raises("IndexError", function() return y[{ {}, tc.tensor {1.0} }] end)
  check.raises("NotImplementedError", function() return y[{ tc.tensor {1}, tc.tensor {1} }] end)
  check.raises("IndexError", function() return y[{ {}, tc.tensor {4} }] end)
  same_compiled(function(t, i) return t[{ {}, i }] * 2, t[{ 2, {}, i }] end, true, y, tc.tensor {3, 1})
end

function T.index_tensor_in_a_later_dim_writes_like_torch()
  local z = y:clone()
  z[{ {}, tc.tensor {3, 1} }] = -1
  check.values(z, cases.set_dim2_number)
  z = y:clone()
  z[{ {}, {}, tc.tensor {2, 4} }] = tc.tensor {10.0, 20.0}
  check.values(z, cases.set_dim3_broadcast)
  z = y:clone()
  z[tc.tensor {2}] = 5
  check.values(z, cases.set_dim1)
  local yg = y:clone():requires_grad_()
  local v = tc.tensor({{1, 2, 3, 4}}, {dtype = tc.float32, requires_grad = true})
  local base = yg * 1
  base[{ {}, tc.tensor {1} }] = v
  ;(base * tc.arange(24.):view(2, 3, 4)):sum():backward()
  check.values(yg.grad, cases.set_dim2_grad_base)
  check.values(v.grad, cases.set_dim2_grad_value)
  same_compiled(function(t, i, v)
    local c = t:clone()
    c[{ {}, i }] = 0
    c[{ {}, {}, i }] = v
    c[i] = 1
    return c
  end, true, y, tc.tensor {2, 1}, tc.tensor {10.0, 20.0})
end

-- ---- gradcheck: float64 central differences against autograd (test_gradcheck.lua's method) ------
local function gradcheck(name, f, inputs)
  local f64 = {dtype = tc.float64}
  tc.manual_seed(11)
  local w = tc.randn(f(table.unpack(inputs)).shape, f64)
  local function loss(...) return (f(...) * w):sum() end
  local analytic = tc.autograd.grad(loss(table.unpack(inputs)), inputs)
  for i, x in ipairs(inputs) do
    local num = tc.zeros(x.shape, f64)
    for k = 1, x:numel() do
      local vals = {}
      for _, sgn in ipairs {1, -1} do
        local xs = {}
        for j, t in ipairs(inputs) do xs[j] = t:detach():clone() end
        local flat = xs[i]:view(-1)
        flat[k] = flat[k]:item() + sgn * 1e-6
        vals[sgn] = loss(table.unpack(xs)):item()
      end
      num:view(-1)[k] = (vals[1] - vals[-1]) / 2e-6
    end
    check.values(analytic[i], num:tolist(), 1e-5, name .. ": input " .. i)
  end
end

function T.gradcheck_index_add_index_fill_repeat_interleave_index_tensors()
  local function R(...) return tc.randn({...}, {dtype = tc.float64}):requires_grad_() end
  local idx = tc.tensor {2, 1, 2}
  gradcheck("index_add", function(a, s) return a:index_add(2, idx, s, 0.5) end, {R(2, 3), R(2, 3)})
  gradcheck("index_fill", function(a, v) return a:index_fill(1, tc.tensor {2}, v) end, {R(3, 2), R()})
  gradcheck("repeat_interleave int", function(a) return a:repeat_interleave(2, 2) end, {R(2, 3)})
  gradcheck("repeat_interleave tensor", function(a) return a:repeat_interleave(tc.tensor {2, 0, 1}, 2) end, {R(2, 3)})
  gradcheck("index read", function(a) return a[{ {}, 1, idx }] end, {R(2, 3, 2)})
  gradcheck("index write", function(a, v)
    local b = a * 1
    b[{ {}, tc.tensor {3, 1} }] = v
    return b
  end, {R(2, 3), R(2, 1)})
end

-- ---- printing -----------------------------------------------------------------------------------
local function repr(t) return (tostring(t):gsub("\n%[tc%.[^\n]*%]$", "")) end

function T.set_printoptions_changes_precision_threshold_edgeitems_linewidth_sci_mode()
  local saved = tc.get_printoptions()
  local ok, err = pcall(function()
    tc.set_printoptions {precision = 2}
    check.eq(repr(tc.tensor {1.23456, 2.5}), cases.print_precision2)
    tc.set_printoptions {threshold = 5, edgeitems = 2}
    check.eq(repr(tc.arange(10)), cases.print_threshold5_edge2)
    tc.set_printoptions {profile = "default"}
    tc.set_printoptions {linewidth = 20}
    check.eq(repr(tc.arange(12.)), cases.print_linewidth20)
    tc.set_printoptions {profile = "default", sci_mode = true}
    check.eq(repr(tc.tensor {1.5, 2.25}), cases.print_sci_true)
    tc.set_printoptions {sci_mode = false}
    check.eq(repr(tc.tensor {1e-5, 1.0}), cases.print_sci_false)
    tc.set_printoptions {profile = "short"}
    check.eq(repr(tc.arange(64.):view(8, 8) / 7), cases.print_short)
    tc.set_printoptions(6, nil, nil, 40, "default")
    check.eq(repr(tc.arange(6.):view(2, 3) / 3), cases.print_precision6_2d)
    tc.set_printoptions {profile = "full"}
    check.eq(repr(tc.arange(2000)):find("...", 1, true), nil, "full prints everything")
    check.eq(tc.get_printoptions().threshold, math.huge)
    check.raises("ValueError", tc.set_printoptions, {precision = -1})
    check.raises("ValueError", tc.set_printoptions, {profile = "long"})
    check.raises("ValueError", tc.set_printoptions, {threshold = "all"})
    check.raises("ValueError", tc.set_printoptions, {precison = 3})
  end)
  tc.set_printoptions(saved)
  if not ok then error(err, 0) end
  check.eq(repr(tc.tensor {1.23456, 2.5}), "tensor([1.2346, 2.5000])")
end

return T
