-- Eager autograd: the tape, backward/grad, leaves and accumulation, retain_grad, hooks, grad mode,
-- detach, higher-order gradients, and the errors PyTorch gives (backward twice, in-place change
-- of a saved tensor, non-scalar backward, in-place on a leaf, not-implemented derivative).
local tc = require "tc"
local T = {}

local function close(a, b, tol, what)
  tol = tol or 1e-10
  if type(b) == "table" then b = tc.tensor(b, {dtype = a.dtype}) end
  local d = (a:double() - b:double()):abs():amax():item()
  if not (d <= tol) then error(("%s: max |difference| %g\n%s\n%s"):format(what or "values", d, tostring(a), tostring(b)), 2) end
end

local function err_kind(f)
  local ok, e = pcall(f)
  assert(not ok, "expected an error")
  return e.kind, e.message, e
end

function T.backward_fills_leaf_grad()
  local x = tc.tensor({1, 2, 3}, {dtype = tc.float64, requires_grad = true})
  local y = (x * x):sum()
  assert(y.grad_fn:name() == "SumBackward0", y.grad_fn:name())
  assert(not y.is_leaf and x.is_leaf)
  y:backward()
  close(x.grad, {2, 4, 6})
end

-- _max_pool2d_backward (the CUDA derivative's kernel) on the CPU: each window's gradient reaches
-- the element the decomposition's max_dim picks (ties and padding included), as max_pool2d's
-- own gradient on the CPU (its decomposition) gives.
function T.max_pool2d_backward_kernel_equals_the_decompositions_gradient()
  tc.manual_seed(3)
  local cases = {
    {{2, 3, 9, 9}, {3, 2, 1, 1, false}, true},   -- overlapping windows, padding, ties from relu
    {{1, 2, 7, 6}, {3, 2, 1, 1, true}, false},   -- ceil_mode: windows past the edge
    {{2, 8, 8}, {2, 2, 0, 2, false}, true},      -- dilation, a [C, H, W] input
    {{1, 1, 5, 5}, {2, 1, 0, 1, false}, false},  -- stride 1
  }
  for i, c in ipairs(cases) do
    local x = tc.randn(table.unpack(c[1])):double()
    if c[3] then x = tc.relu(x) end
    local k, s, p, d, ceil = table.unpack(c[2])
    local xr = x:clone():requires_grad_()
    local y = tc.max_pool2d(xr, k, s, p, d, ceil)
    local g = tc.randn(table.unpack(y.shape)):double()
    y:backward(g)
    close(tc._max_pool2d_backward(g, x, {k, k}, {s, s}, {p, p}, {d, d}, ceil), xr.grad, 1e-12, "case " .. i)
  end
  local ok, e = pcall(tc._max_pool2d_backward, tc.zeros(1, 1, 3, 3), tc.zeros(1, 1, 4, 4), {2, 2})
  assert(not ok and e.kind == "ShapeError", tostring(e and e.message))
end

function T.gradients_accumulate_across_backward_calls()
  local x = tc.tensor({1, 2}, {dtype = tc.float64, requires_grad = true})
  ;(x * 3):sum():backward()
  ;(x * x):sum():backward()
  close(x.grad, {5, 7})
  x.grad = nil
  ;(x * 2):sum():backward()
  close(x.grad, {2, 2})
end

function T.grad_fn_names_follow_pytorch()
  local a = tc.randn(2, 3, {requires_grad = true})
  assert((a * 2).grad_fn:name() == "MulBackward0")
  assert(a:log_softmax(2).grad_fn:name() == "LogSoftmaxBackward0")
  assert(a:max(2).grad_fn:name() == "MaxDimBackward0")
  assert(tostring((a + 1).grad_fn) == "<AddBackward0>")
  assert(a.grad_fn == nil)
end

function T.broadcast_gradients_are_summed_to_input_shapes()
  local a = tc.ones(3, 1, {dtype = tc.float64, requires_grad = true})
  local b = tc.ones(4, {dtype = tc.float64, requires_grad = true})
  ;((a + b) * 2):sum():backward()
  close(a.grad, {{8}, {8}, {8}})
  close(b.grad, {6, 6, 6, 6})
end

function T.non_leaf_grads_only_with_retain_grad()
  local x = tc.tensor({1, 2}, {dtype = tc.float64, requires_grad = true})
  local h = x * 2
  local k = x * 3
  h:retain_grad()
  assert(h.retains_grad and not k.retains_grad)
  ;(h * k):sum():backward()
  close(h.grad, {3, 6})
  assert(k.grad == nil)
  close(x.grad, {12, 24})
end

function T.autograd_grad_returns_without_accumulating()
  local x = tc.tensor({1, 2}, {dtype = tc.float64, requires_grad = true})
  local w = tc.tensor({3, 4}, {dtype = tc.float64, requires_grad = true})
  local y = (x * w):sum()
  local g = tc.autograd.grad(y, {x, w})
  close(g[1], {3, 4})
  close(g[2], {1, 2})
  assert(x.grad == nil and w.grad == nil)
  local gx = tc.autograd.grad((x * x):sum(), x)
  close(gx, {2, 4})
end

function T.grad_outputs_weight_a_non_scalar_output()
  local x = tc.tensor({1, 2}, {dtype = tc.float64, requires_grad = true})
  local y = x * x
  local g = tc.autograd.grad({y}, {x}, {grad_outputs = {tc.tensor({1, 10}, {dtype = tc.float64})}})
  close(g[1], {2, 40})
  local z = x * 3
  z:backward(tc.tensor({1, 2}, {dtype = tc.float64}))
  close(x.grad, {3, 6})
end

function T.unused_input_needs_allow_unused()
  local x = tc.randn(2, {requires_grad = true})
  local u = tc.randn(2, {requires_grad = true})
  local y = (x * 2):sum()
  local kind = err_kind(function() tc.autograd.grad(y, {x, u}, {retain_graph = true}) end)
  assert(kind == "ValueError")
  local g = tc.autograd.grad(y, {x, u}, {allow_unused = true})
  assert(g[1] ~= nil and g[2] == nil)
end

function T.second_order_gradients_with_create_graph()
  local x = tc.tensor({0.5, 1.5}, {dtype = tc.float64, requires_grad = true})
  local y = (x:sin() * x * x):sum()
  local g = tc.autograd.grad(y, x, {create_graph = true})
  -- d/dx (x^2 sin x) = 2x sin x + x^2 cos x
  local xs = x:detach()
  close(g, xs:sin() * xs * 2 + xs:cos() * xs * xs)
  assert(g.requires_grad)
  local g2 = tc.autograd.grad(g:sum(), x)
  -- d2 = 2 sin x + 4x cos x - x^2 sin x
  close(g2, xs:sin() * 2 + xs:cos() * xs * 4 - xs:sin() * xs * xs, 1e-9)
end

function T.third_order_gradient_of_a_polynomial()
  local x = tc.tensor({2}, {dtype = tc.float64, requires_grad = true})
  local y = (x ^ 4):sum()
  local g1 = tc.autograd.grad(y, x, {create_graph = true})
  local g2 = tc.autograd.grad(g1:sum(), x, {create_graph = true})
  local g3 = tc.autograd.grad(g2:sum(), x)
  close(g1, {32})
  close(g2, {48})
  close(g3, {48})
end

function T.dtype_conversion_converts_the_gradient_back()
  local x = tc.tensor({1.0, 2}, {requires_grad = true})
  ;(x:double() * 2):sum():backward()
  assert(x.grad.dtype == tc.float32)
  close(x.grad, {2, 2})
end

function T.half_precision_gradients()
  local x = tc.tensor({1, 2, 3}, {dtype = tc.float16, requires_grad = true})
  ;(x * x):sum():backward()
  assert(x.grad.dtype == tc.float16)
  close(x.grad, {2, 4, 6}, 1e-3)
  local b = tc.tensor({1, -2}, {dtype = tc.bfloat16, requires_grad = true})
  tc.relu(b):sum():backward()
  close(b.grad, {1, 0}, 1e-3)
end

function T.no_grad_stops_recording()
  local x = tc.randn(3, {requires_grad = true})
  local y
  do
    local _ <close> = tc.no_grad()
    y = x * 2
  end
  assert(not y.requires_grad and y.grad_fn == nil)
  local z = tc.no_grad(function() return x:view(3) end)
  assert(not z.requires_grad, "a view made under no_grad does not require grad")
  local w = tc.no_grad(function() return tc.enable_grad(function() return x * 2 end) end)
  assert(w.requires_grad and w.grad_fn ~= nil)
end

function T.detach_cuts_the_graph_and_shares_storage()
  local x = tc.tensor({1, 2}, {dtype = tc.float64, requires_grad = true})
  local d = (x * 2):detach()
  assert(not d.requires_grad and d.is_leaf)
  local y = (x * d):sum()
  y:backward()
  close(x.grad, {2, 4})
end

function T.requires_grad_underscore_and_integer_outputs()
  local x = tc.tensor({1.0, -2.0}):requires_grad_()
  assert(x.requires_grad)
  local i = x:argmax()
  assert(not i.requires_grad)
  local m = x:gt(0)
  assert(not m.requires_grad)
  local k = err_kind(function() (x * 2).requires_grad = false end)
  assert(k == "ValueError")
end

function T.hooks_see_and_replace_gradients()
  local x = tc.tensor({1, 2}, {dtype = tc.float64, requires_grad = true})
  local seen
  local h = x * 3
  h:register_hook(function(g) seen = g:clone(); return g * 10 end)
  local handle = x:register_hook(function(g) return g + 1 end)
  ;(h * 1):sum():backward()
  close(seen, {1, 1})
  close(x.grad, {31, 31})
  handle:remove()
  x.grad = nil
  ;(x * 1):sum():backward()
  close(x.grad, {1, 1})
end

function T.backward_twice_without_retain_graph_is_an_error()
  local x = tc.randn(3, {requires_grad = true})
  local y = (x:exp()):sum()
  y:backward()
  local kind, msg = err_kind(function() y:backward() end)
  assert(kind == "ValueError" and msg:find("second time", 1, true), msg)
  local z = x:exp():sum()
  z:backward({retain_graph = true})
  z:backward()
end

function T.error_is_raised_at_the_users_line()
  local x = tc.randn(3, {requires_grad = true})
  local y = x:exp():sum()
  y:backward()
  local line = debug.getinfo(1, "l").currentline + 1
  local ok, e = pcall(function() y:backward() end)
  assert(not ok and e.line == line, tostring(e.line) .. " vs " .. line)
  assert(tostring(e):find("test_autograd.lua:" .. line, 1, true), tostring(e))
end

function T.in_place_change_of_a_saved_tensor_is_an_error()
  local x = tc.randn(3, {requires_grad = true})
  local e = x:exp()
  local y = (e * 2):sum()   -- exp saved its output e
  e:add_(1)
  local kind, msg = err_kind(function() y:backward() end)
  assert(kind == "ValueError" and msg:find("modified by an in-place operation", 1, true), msg)
  assert(msg:find("ExpBackward0", 1, true), msg)
end

function T.in_place_on_a_leaf_that_requires_grad_is_an_error()
  local x = tc.randn(3, {requires_grad = true})
  local kind, msg = err_kind(function() x:add_(1) end)
  assert(kind == "ValueError" and msg:find("leaf", 1, true), msg)
  kind = err_kind(function() x:copy_(tc.zeros(3)) end)
  assert(kind == "ValueError")
  tc.no_grad(function() x:add_(1) end)  -- allowed without grad mode
  -- in-place initialization (what tc.nn's init code does) is allowed, and x stays a leaf
  x:normal_()
  x[2] = 0
  assert(x.is_leaf and x.requires_grad and x[2]:item() == 0)
end

function T.in_place_on_a_non_leaf_is_recorded()
  local x = tc.tensor({1, 2}, {dtype = tc.float64, requires_grad = true})
  local h = x * 2
  h:mul_(3)
  h:sum():backward()
  close(x.grad, {6, 6})
  local y = x * 1
  y:relu_()
  assert(y.grad_fn ~= nil)
end

function T.in_place_write_into_a_view_reroutes_gradients()
  local x = tc.arange(1, 13, {dtype = tc.float64}):view(3, 4):requires_grad_()
  local h = x * 2
  h[{ {}, 2 }] = 0
  assert(h.grad_fn:name() == "CopySlices", h.grad_fn:name())
  ;(h * h):sum():backward()
  local want = x:detach() * 8
  want[{ {}, 2 }] = 0
  close(x.grad, want)
end

function T.assigning_a_tensor_into_a_buffer_records_it()
  local y = tc.tensor({3, 4}, {dtype = tc.float64, requires_grad = true})
  local buf = tc.zeros(3, 2, {dtype = tc.float64})
  buf[2] = y
  assert(buf.requires_grad and not buf.is_leaf)
  ;(buf * tc.tensor({{1, 2}, {3, 4}, {5, 6}}, {dtype = tc.float64})):sum():backward()
  close(y.grad, {3, 4})
end

function T.in_place_op_on_a_view_and_a_view_taken_before()
  local x = tc.tensor({{1, -2}, {-3, 4}, {5, -6}}, {dtype = tc.float64, requires_grad = true})
  local h = x * 1
  local first = h[1]          -- taken before the write: its history is renewed when used
  h[{ {2, 3} }]:relu_()
  h[{ 3 }] = 7
  local loss = (first * 10):sum() + (h * h):sum()
  loss:backward()
  -- row 1: 10 + 2x; row 2: relu'(x) * 2 relu(x); row 3: overwritten by a constant
  close(x.grad, {{12, 6}, {0, 8}, {0, 0}})
end

function T.in_place_write_into_a_view_of_a_leaf_is_an_error()
  local x = tc.zeros(2, 2, {requires_grad = true})
  local kind, msg = err_kind(function() x[1] = tc.ones(2, {requires_grad = true}) end)
  assert(kind == "ValueError" and msg:find("view of a leaf", 1, true), msg)
end

function T.backward_of_a_non_scalar_needs_a_gradient()
  local x = tc.randn(3, {requires_grad = true})
  local kind, msg = err_kind(function() (x * 2):backward() end)
  assert(kind == "ValueError" and msg:find("scalar outputs", 1, true), msg)
end

function T.backward_of_a_tensor_without_grad_is_an_error()
  local kind, msg = err_kind(function() tc.ones(1):backward() end)
  assert(kind == "ValueError" and msg:find("does not require grad", 1, true), msg)
end

function T.gradient_through_a_non_differentiable_op_is_an_error()
  local x = tc.randn(4, {requires_grad = true})
  local picked = x:argmax():double()  -- argmax's result never requires grad
  assert(not picked.requires_grad)
  local kind, msg = err_kind(function() picked:backward() end)
  assert(kind == "ValueError" and msg:find("does not require grad", 1, true), msg)
  kind, msg = err_kind(function() tc.autograd.grad(x:gt(0):double():sum(), x) end)
  assert(kind == "ValueError" and msg:find("does not require grad", 1, true), msg)
end

function T.not_implemented_derivative_is_a_clear_error()
  local a = tc.randn(1, 1, 2, 3, {requires_grad = true})
  local y = tc.pad(a:view(2, 3), {1, 1}, "reflect"):sum()
  local kind, msg = err_kind(function() y:backward() end)
  assert(kind == "NotImplementedError" and msg:find("reflect", 1, true), msg)
end

function T.backward_with_inputs_accumulates_only_those()
  local x = tc.tensor({1}, {dtype = tc.float64, requires_grad = true})
  local w = tc.tensor({2}, {dtype = tc.float64, requires_grad = true})
  ;(x * w):sum():backward(nil, {inputs = {w}})
  close(w.grad, {1})
  assert(x.grad == nil)
  local h = x * 3
  ;(h * w):sum():backward(nil, {inputs = {h}})
  close(h.grad, {2})
  assert(x.grad == nil)
end

function T.views_and_slices_route_gradients()
  local x = tc.arange(1, 13, {dtype = tc.float64}):view(3, 4):requires_grad_()
  local y = x[{ {2, 3}, {1, 4, 2} }]   -- rows 2..3, columns 1 and 3
  ;(y * y):sum():backward()
  close(x.grad, {{0, 0, 0, 0}, {10, 0, 14, 0}, {18, 0, 22, 0}})
end

function T.shared_subexpressions_accumulate()
  local x = tc.tensor({3}, {dtype = tc.float64, requires_grad = true})
  local a = x * 2
  local y = (a * a + a):sum()
  y:backward()
  close(x.grad, {2 * (2 * 6) + 2})
end

function T.optimizer_style_update_under_no_grad()
  local w = tc.tensor({1, 2}, {dtype = tc.float64, requires_grad = true})
  for _ = 1, 3 do
    local loss = (w * w):sum()
    loss:backward()
    tc.no_grad(function() w:sub_(w.grad * 0.25) end)
    w.grad = nil
  end
  close(w, {0.125, 0.25})
  assert(w.requires_grad and w.is_leaf)
end

function T.dropout_backward_uses_the_forward_mask()
  tc.manual_seed(1)
  local x = tc.ones(200, {dtype = tc.float64, requires_grad = true})
  local y = tc.dropout(x, 0.5, true)
  y:sum():backward()
  close(x.grad, y:detach(), 0, "the gradient of dropout is its mask times 1/(1-p)")
end

function T.model_style_linear_cross_entropy_trains()
  tc.manual_seed(0)
  local w = (tc.randn(3, 4) * 0.1):requires_grad_()
  local b = tc.zeros(3, {requires_grad = true})
  local x = tc.randn(16, 4)
  local y = x:matmul(tc.tensor({{1.0, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}}):t()):argmax(2)
  local first, last
  for i = 1, 30 do
    local loss = tc.cross_entropy(tc.linear(x, w, b), y)
    if i == 1 then first = loss:item() end
    last = loss:item()
    loss:backward()
    tc.no_grad(function()
      w:sub_(w.grad * 0.5)
      b:sub_(b.grad * 0.5)
    end)
    w.grad, b.grad = nil, nil
  end
  assert(last < first * 0.7, ("loss %g -> %g"):format(first, last))
end

return T
