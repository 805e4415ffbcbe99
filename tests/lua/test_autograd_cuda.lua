-- Autograd on the GPU: parameter and input gradients of small models computed on CUDA equal the
-- CPU's (float32, DESIGN.md §4-style tolerance). The formulas are tc ops, so the backward runs on
-- the device kernels. Without a GPU every test skips (the lead runs them on the GPU host).
local tc = require "tc"
local check = require "check"
local T = {}

local function grads_on(device, build, inputs)
  tc.manual_seed(11)
  local params = build()
  local xs, ps = {}, {}
  for i, x in ipairs(inputs) do xs[i] = tc.is_tensor(x) and x:to(device) or x end
  for i, p in ipairs(params) do ps[i] = p:to(device):requires_grad_() end
  local loss = params.loss(ps, xs)
  loss:backward()
  local out = {loss:cpu()}
  for i, p in ipairs(ps) do out[i + 1] = p.grad:cpu() end
  return out
end

local function compare(build, inputs)
  local a, b = grads_on("cpu", build, inputs), grads_on("cuda", build, inputs)
  for i = 1, #a do
    local scale = a[i]:abs():amax():item() + 1e-6
    local d = (a[i] - b[i]):abs():amax():item()
    if not (d <= 1e-4 * scale + 1e-5) then error(("gradient %d: cpu and cuda differ by %g (scale %g)"):format(i, d, scale), 2) end
  end
end

function T.mlp_cross_entropy_grads_match_cpu()
  tc.manual_seed(1)
  local x, y = tc.randn(8, 5), tc.randint(1, 4, {8})
  compare(function()
    local p = {tc.randn(6, 5) * 0.3, tc.randn(6) * 0.1, tc.randn(3, 6) * 0.3, tc.zeros(3)}
    p.loss = function(ps, xs)
      local h = tc.gelu(tc.linear(xs[1], ps[1], ps[2]))
      return tc.cross_entropy(tc.linear(h, ps[3], ps[4]), xs[2], nil, {label_smoothing = 0.1})
    end
    return p
  end, {x, y})
end

function T.cnn_conv_batch_norm_pool_grads_match_cpu()
  tc.manual_seed(2)
  local x, y = tc.randn(4, 3, 8, 8), tc.randint(1, 5, {4})
  compare(function()
    local p = {tc.randn(6, 3, 3, 3) * 0.2, tc.zeros(6), tc.ones(6), tc.zeros(6), tc.randn(4, 6 * 4 * 4) * 0.1}
    p.loss = function(ps, xs)
      local h = tc.conv2d(xs[1], ps[1], ps[2], 1, 1)
      h = tc.batch_norm(h, ps[3], ps[4], nil, nil, true)
      h = tc.max_pool2d(tc.relu(h), 2)
      return tc.cross_entropy(tc.linear(h:flatten(2), ps[5]), xs[2])
    end
    return p
  end, {x, y})
end

-- max_pool2d's gradient on CUDA is one _max_pool2d_backward kernel; on the CPU the decomposition
-- (ties from relu, padding, overlapping windows, ceil_mode, dilation): the same gradients.
function T.max_pool2d_grads_match_cpu()
  tc.manual_seed(4)
  for _, c in ipairs {{{2, 4, 17, 17}, {3, 2, 1, 1, false}}, {{2, 3, 9, 8}, {3, 2, 1, 1, true}},
                      {{1, 2, 10, 10}, {2, 2, 0, 2, false}}, {{3, 11, 11}, {2, 1, 1, 1, false}}} do
    local x = tc.relu(tc.randn(table.unpack(c[1])))
    local k, s, p, d, ceil = table.unpack(c[2])
    local w = tc.randn(table.unpack(tc.max_pool2d(x, k, s, p, d, ceil).shape))
    compare(function()
      local ps = {x:clone()}
      ps.loss = function(q, xs) return (tc.max_pool2d(q[1], k, s, p, d, ceil) * xs[1]):sum() end
      return ps
    end, {w})
  end
end

-- batch_norm's results in two runs, a and b ({output, input gradient, weight gradient, bias
-- gradient, running mean, running var}), agree within tol relative to a's scale (and tol / 10).
local function expect_same_norm(a, b, tol, what)
  local names = {"output", "input gradient", "weight gradient", "bias gradient", "running mean", "running var"}
  for i, name in ipairs(names) do
    local scale = a[i]:abs():amax():item() + 1e-6
    local d = (a[i] - b[i]):abs():amax():item()
    if not (d <= tol * scale + tol * 0.1) then error(("%s: %s differs by %g (scale %g)"):format(what, name, d, scale), 3) end
  end
end

-- stdlib/cuda/batch_norm.cpp holds a channel of at most 16384 elements (8192 in float64) in one
-- block's registers, 1 to 16 elements a thread on 32 to 1024 threads, and splits larger channels
-- over several blocks (two passes). The cases: each register form (E = 1, 2, 4, 8, 16 elements a
-- thread; float64's 8 on 512 threads), the split in float32 and float64, channels whose element
-- count is no multiple of the block, map sizes that do not divide the block (5x5, 13x29, 37x41),
-- 3-d input; all with a mean far from zero (the sums are shifted), and the backward with running
-- statistics (eval mode).
function T.batch_norm_train_and_backward_match_cpu_for_every_split()
  local cases = {
    {{16, 8, 32, 32}, "float32"}, {{3, 5, 37, 41}, "float32"}, {{4, 6, 5, 5}, "float32"},
    {{2, 3, 1000}, "float32"}, {{16, 4, 64, 64}, "float64"}, {{5, 7, 9, 11}, "float64"},
    {{4, 96, 16, 16}, "float32"}, {{3, 70, 13, 29}, "float32"}, {{16, 80, 32, 32}, "float32"},
    {{2, 72, 40, 40}, "float64"}, {{1, 4, 5, 5}, "float32"}, {{2, 3, 4, 5}, "float32"}, {{8, 3, 48, 48}, "float32"},
  }
  for _, case in ipairs(cases) do
    local shape, dt = case[1], case[2]
    for _, training in ipairs({true, false}) do
      tc.manual_seed(7)
      local C = shape[2]
      local x = (tc.randn(shape) * 0.5 + 50):to(dt)
      local w, b = (tc.rand(C) + 0.5):to(dt), tc.randn(C):to(dt)
      local rm, rv = (tc.randn(C) + 50):to(dt), (tc.rand(C) + 0.2):to(dt)
      local gout = tc.randn(shape):to(dt)
      local got = {}
      for _, device in ipairs({"cpu", "cuda"}) do
        local function leaf(t) return t:clone():to(device):requires_grad_() end  -- (clone: cpu's :to is t itself)
        local xd, wd, bd = leaf(x), leaf(w), leaf(b)
        local rmd, rvd = rm:clone():to(device), rv:clone():to(device)
        local y = tc.batch_norm(xd, wd, bd, rmd, rvd, training, 0.1, 1e-5)
        local loss = (y * gout:to(device)):sum()
        loss:backward()
        got[device] = {y:cpu(), xd.grad:cpu(), wd.grad:cpu(), bd.grad:cpu(), rmd:cpu(), rvd:cpu()}
      end
      expect_same_norm(got.cpu, got.cuda, dt == "float64" and 1e-9 or 1e-4,
                       ("batch_norm %s %s training=%s, cpu against cuda"):format(table.concat(shape, "x"), dt, tostring(training)))
    end
  end
end

-- A compiled batch_norm with batch statistics followed by relu is one library call on the CUDA
-- backend (backends/cuda/cuda_fuse.h: the relu applied as the normalization is stored): no
-- generated kernel is left in a forward graph, and in training (default and reduce-overhead,
-- three calls each, so reduce-overhead replays its recording) the output, the input, weight and
-- bias gradients and the running statistics equal eager's, for a channel split over several
-- blocks and for one block per channel.
function T.compiled_batch_norm_relu_is_one_call_and_trains_like_eager()
  local function step(x, w, b, rm, rv, gout)
    local y = tc.relu(tc.batch_norm(x, w, b, rm, rv, true, 0.1, 1e-5))
    local loss = (y * gout):sum()
    loss:backward()
    return y
  end
  for _, shape in ipairs({{16, 8, 32, 32}, {4, 6, 5, 5}}) do
    for _, mode in ipairs({"default", "reduce-overhead"}) do
      tc.compiler.reset()
      tc.manual_seed(5)
      local C = shape[2]
      local x0 = tc.randn(shape, {device = "cuda"}) * 2 + 0.5
      local w0, b0 = tc.rand(C, {device = "cuda"}) + 0.5, tc.randn(C, {device = "cuda"}) * 0.5
      local gout = tc.randn(shape, {device = "cuda"})
      local state = {}
      for _, how in ipairs({"eager", "compiled"}) do
        local x, w, b = x0:clone():requires_grad_(), w0:clone():requires_grad_(), b0:clone():requires_grad_()
        local rm, rv = tc.zeros(C, {device = "cuda"}), tc.ones(C, {device = "cuda"})
        local f = how == "eager" and step or tc.compile(step, mode == "default" and {} or {mode = mode})
        local y
        for _ = 1, 3 do
          x.grad, w.grad, b.grad = nil, nil, nil
          y = f(x, w, b, rm, rv, gout)
        end
        state[how] = {y, x.grad, w.grad, b.grad, rm, rv}
      end
      expect_same_norm(state.eager, state.compiled, 1e-4, ("%s %s, eager against compiled"):format(table.concat(shape, "x"), mode))
    end
  end
  tc.compiler.reset()
  local x = tc.randn(4, 6, 8, 8, {device = "cuda"})
  local w, b, rm, rv = tc.ones(6, {device = "cuda"}), tc.zeros(6, {device = "cuda"}), tc.zeros(6, {device = "cuda"}), tc.ones(6, {device = "cuda"})
  local y = tc.compile(function(t) return tc.relu(tc.batch_norm(t, w, b, rm, rv, true, 0.1, 1e-5)) end)(x)
  local want = tc.relu(tc.batch_norm(x, w, b, tc.zeros(6, {device = "cuda"}), tc.ones(6, {device = "cuda"}), true, 0.1, 1e-5))
  assert((y - want):abs():max():item() < 1e-5, "the forward-only graph's output differs from eager")
  local kernels = tc.compiler.stats().kernels
  if kernels ~= 0 then error(("batch_norm + relu left %d generated kernels in the forward graph"):format(kernels)) end
end

function T.attention_block_grads_match_cpu()
  tc.manual_seed(3)
  local ids = tc.randint(1, 11, {2, 5})
  compare(function()
    local p = {tc.randn(10, 8) * 0.5, tc.ones(8), tc.zeros(8), tc.randn(24, 8) * 0.3, tc.randn(10, 8) * 0.3}
    p.loss = function(ps, xs)
      local h = tc.layer_norm(tc.embedding(xs[1], ps[1]), {8}, ps[2], ps[3])
      local qkv = tc.linear(h, ps[4]):view(2, 5, 3, 2, 4):permute(3, 1, 4, 2, 5)
      local a = tc.scaled_dot_product_attention(qkv[1], qkv[2], qkv[3], nil, 0, true)
      a = a:transpose(2, 3):reshape(2, 5, 8)
      return (tc.linear(a + h, ps[5]):log_softmax(-1) * -1):mean()
    end
    return p
  end, {ids})
end

if not tc.cuda.is_available() then
  for name in pairs(T) do T[name] = function() check.skip("no CUDA device") end end
end

return T
