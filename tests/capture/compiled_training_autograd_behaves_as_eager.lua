-- Compiled training through autograd's user surface: a compiled function's outputs link to one
-- CompiledFunctionBackward node, and hooks, retain_grad, .grad accumulation, tc.autograd.grad,
-- backward(inputs=...), retain_graph, unused outputs and graph breaks behave as in eager;
-- create_graph through the compiled backward is a clear error; the backward is compiled once per
-- entry; recomputing cheap pointwise values saves fewer tensors than saving every needed one.
local tc = require "tc"
local h = require "helpers"

local function leaves()
  tc.manual_seed(1)
  return tc.randn(4, 3, {requires_grad = true}), tc.randn(4, {requires_grad = true}), tc.randn(5, 3)
end

local function body(w, b, x)
  local a = tc.nn.functional.linear(x, w, b)
  local g = tc.gelu(a)
  return (g:relu() + 1):tanh(), a
end
local compiled = tc.compile(body, {backend = "eager"})

local function err_of(f)
  local ok, e = pcall(f)
  assert(not ok, "expected an error")
  return type(e) == "table" and e.kind or "?", type(e) == "table" and e.message or tostring(e)
end

-- .grad accumulation over two calls, hooks on the output and on a leaf, retain_grad
local results = {}
for _, f in ipairs {body, compiled} do
  local w, b, x = leaves()
  local seen
  local handle = w:register_hook(function(g) return g * 2 end)
  for _ = 1, 2 do
    local y = f(w, b, x)
    y:retain_grad()
    y:register_hook(function(g) seen = g:clone(); return g * 3 end)
    ;(y * y):sum():backward()
    results[#results + 1] = {w.grad:clone(), b.grad:clone(), y.grad:clone(), seen}
  end
  handle:remove()
end
for i = 1, 2 do
  for k, name in ipairs {"w.grad", "b.grad", "retained y.grad", "output hook's gradient"} do
    h.close_to_eager(results[2 + i][k], results[i][k], name .. " after call " .. i)
  end
end
do
  local w, b, x = leaves()
  local y = compiled(w, b, x)
  h.eq(y.grad_fn ~= nil and tostring(y.grad_fn):find("CompiledFunctionBackward", 1, true) ~= nil, true, "grad_fn")
  h.eq(y.is_leaf, false, "is_leaf")
end

-- tc.autograd.grad and backward(inputs=...): only what is asked
do
  local w, b, x = leaves()
  local ge = tc.autograd.grad((body(w, b, x)):sum(), {w})[1]
  local gc = tc.autograd.grad((compiled(w, b, x)):sum(), {w})[1]
  h.close_to_eager(gc, ge, "tc.autograd.grad")
  assert(w.grad == nil and b.grad == nil, "tc.autograd.grad accumulated into .grad")
  ;(compiled(w, b, x)):sum():backward(nil, {inputs = {b}})
  assert(w.grad == nil, "backward(inputs={b}) accumulated into w")
  h.close_to_eager(b.grad, tc.autograd.grad((body(w, b, x)):sum(), {b})[1], "backward(inputs={b})")
end

-- an output that gets no gradient gets zeros; retain_graph; a second backward is eager's error
do
  local w, b, x = leaves()
  local y, a = compiled(w, b, x)
  y:sum():backward({retain_graph = true})
  local g1 = w.grad:clone()
  y:sum():backward()
  h.close_to_eager(w.grad, g1 * 2, "second backward with retain_graph")
  local kind, msg = err_of(function() y:sum():backward() end)
  assert(kind == "ValueError" and msg:find("second time", 1, true), msg)
  local w2, b2, x2 = leaves()
  local _, a2 = compiled(w2, b2, x2)
  a2:sum():backward()  -- only the second output
  local _, ae = body(w, b, x)
  h.close_to_eager(w2.grad, tc.autograd.grad(ae:sum(), {w})[1], "gradient through the second output only")
end

-- create_graph through the compiled backward: a clear error
do
  local w, b, x = leaves()
  local y = compiled(w, b, x)
  local kind, msg = err_of(function() tc.autograd.grad(y:sum(), {w}, {create_graph = true}) end)
  assert(kind == "NotImplementedError" and msg:find("create_graph", 1, true), kind .. ": " .. msg)
end

-- the backward compiles once per entry, at its first run
do
  tc.compiler.reset()
  local f = tc.compile(function(w, x) return (x * w):sin():sum() end, {backend = "eager"})
  local w, x = tc.randn(3, {requires_grad = true}), tc.randn(3)
  local y = f(w, x)
  h.eq(h.stats().backward_compiles, 0, "backward compiles before backward()")
  y:backward()
  for _ = 1, 3 do f(w, x):backward() end
  local s = h.stats()
  h.eq(s.training_entries, 1, "training entries")
  h.eq(s.backward_compiles, 1, "backward compiles after 4 backwards")
  h.eq(s.traces, 1, "traces")
end

-- a graph break inside: each graph trains as its own entry, results equal eager
do
  tc.compiler.reset()
  local function f(w, x)
    local y = (x * w):exp()
    print = print  -- luacheck: ignore (a global write is traced; the call below breaks)
    io.write("")
    return (y * w):sum()
  end
  local w, x = tc.randn(3, {requires_grad = true}), tc.randn(3)
  local ge = tc.autograd.grad(f(w, x), {w})[1]
  local gc = tc.autograd.grad(tc.compile(f, {backend = "eager"})(w, x), {w})[1]
  h.close_to_eager(gc, ge, "gradient across a graph break")
  local s = h.stats()
  h.eq(s.graph_breaks, 1, "breaks")
  h.eq(s.training_entries, 2, "training entries")
  h.eq(s.training_eager, 0, "graphs trained op by op")
end

-- an in-place write into an input that requires grad: that graph runs with eager autograd, so
-- the error is eager's
do
  tc.compiler.reset()
  local w = tc.randn(3, {requires_grad = true})
  local f = tc.compile(function(v) local y = v * 2; v:add_(1); return y end, {backend = "eager"})
  local _, msg = err_of(function() f(w) end)
  assert(msg:find("leaf", 1, true), msg)
end

-- recompute: a chain of pointwise ops saves fewer tensors than saving what the tape saves
local function saved_with(recompute)
  tc.compiler.reset()
  tc.config.aot_recompute = recompute
  tc.manual_seed(2)
  local f = tc.compile(function(w, x)
    local a = x * w + 1
    return (tc.gelu(a):relu() * a:sigmoid()):sum()
  end, {backend = "eager"})
  local w, x = tc.randn(6, {requires_grad = true}), tc.randn(6)
  local g = tc.autograd.grad(f(w, x), {w})[1]
  tc.config.aot_recompute = true
  return h.stats().saved_tensors, g
end
local naive, g_naive = saved_with(false)
local fewer, g_fewer = saved_with(true)
assert(naive >= 3 and fewer < naive, ("saved tensors: %d with recompute, %d without"):format(fewer, naive))
h.close_to_eager(g_fewer, g_naive, "gradient with recompute")

-- TC_LOGS=aot_graphs prints the forward (with its saved outputs) and the backward graph
do
  local out, rc = h.run([[
    local tc = require "tc"
    local w = tc.randn(3, {requires_grad = true})
    tc.compile(function(x) return (x * w):exp():sum() end)(tc.randn(3)):backward()
  ]], "--log=aot_graphs")
  h.eq(rc, 0, "exit status:\n" .. out)
  assert(out:find("[tc aot_graphs]", 1, true) and out:find("forward (saves", 1, true), out)
  assert(out:find("backward\ngraph(", 1, true) and out:find("%tangent_1", 1, true), out)
end

-- a size change makes the graph dynamic: each size gets its own joint, gradients stay eager's
do
  tc.compiler.reset()
  local w = tc.randn(3, 4, {requires_grad = true})
  local function f(x) return (x:matmul(w)):relu():pow(2):mean() end
  local cf = tc.compile(f, {backend = "eager"})
  for _, n in ipairs {8, 5, 3, 5} do
    local x = tc.randn(n, 3)
    h.close_to_eager(tc.autograd.grad(cf(x), {w})[1], tc.autograd.grad(f(x), {w})[1], "batch " .. n)
  end
  local s = h.stats()
  h.eq(s.training_eager, 0, "graphs trained op by op")
  h.eq(s.training_entries, 3, "one joint per size (8, then 5 and 3 on the dynamic entry)")
end

-- explain lists each joint: what the forward saves and the backward graph's ops
do
  tc.compiler.reset()
  local w = tc.randn(3, {requires_grad = true})
  local report = tc.compiler.explain(function(x) return (x * w):exp():sum() end)(tc.randn(3))
  h.eq(#report.training, 1, "training lines")
  assert(report.training[1]:find("the forward saves %d+ values") and report.training[1]:find("backward graph of", 1, true),
    report.training[1])
end

-- regional compilation: the layers of a model share one training entry and one backward compile
do
  tc.compiler.reset()
  local seed = require "seed_layers"
  tc.manual_seed(0)
  local eager = seed.Model({num_layers = 8})
  tc.manual_seed(0)
  local regional = seed.Model({num_layers = 8, regional = true})
  local x = tc.randn(4, 10)
  eager(x):pow(2):sum():backward()
  regional(x):pow(2):sum():backward()
  local pe, pr = eager:parameters(), regional:parameters()
  for i = 1, #pe do h.close_to_eager(pr[i].grad, pe[i].grad, "regional: gradient of parameter " .. i) end
  local s = h.stats()
  h.eq(s.training_entries, 1, "training entries of 8 compiled layers")
  h.eq(s.backward_compiles, 1, "backward compiles of 8 compiled layers")
end
