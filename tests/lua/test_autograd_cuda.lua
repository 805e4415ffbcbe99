-- Autograd on the GPU: parameter and input gradients of small models computed on CUDA equal the
-- CPU's (float32, DESIGN.md §4-style tolerance). The formulas are tc ops, so the backward runs on
-- the device kernels. Without a GPU this file has no tests (the lead runs it on the GPU host).
local tc = require "tc"
local T = {}
if not tc.cuda.is_available() then return T end

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

return T
