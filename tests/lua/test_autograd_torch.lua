-- Gradients against PyTorch's (fixtures: tests/fixtures/gen_autograd.py ->
-- tests/fixtures/autograd/grads.json, made with Debian's torch 1.13): the same functions in Lua
-- (indices 1-based), loss = sum(out * cos(0..n-1)), every input's gradient compared.
local tc = require "tc"
local json = require "json"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local cases
local function load()
  if cases then return cases end
  local f = assert(io.open(here .. "/../fixtures/autograd/grads.json"))
  cases = json.decode(f:read("a"))
  f:close()
  return cases
end

local f64 = {dtype = tc.float64}
local function t(v) return tc.tensor(v, f64) end
local function sdpa(q, k, v, causal) return tc.scaled_dot_product_attention(q, k, v, nil, 0, causal) end

-- mirrors CASES of the generator
local F = {
  cross_entropy_weight_ignore_smoothing = function(x, w)
    return tc.cross_entropy(x, tc.tensor({1, 3, 2, 2, 1}), w, {ignore_index = 2, label_smoothing = 0.2}) end,
  cross_entropy_probs = function(x, p) return tc.cross_entropy(x, p, nil, {label_smoothing = 0.1}) end,
  cross_entropy_spatial_sum = function(x) return tc.cross_entropy(x, tc.tensor({{1, 2}, {3, 3}}), nil, "sum") end,
  nll_loss_weight = function(x, w) return tc.nll_loss(x, tc.tensor({1, 3, 2, 3}), w) end,
  max_pool2d_ties = function(x) return tc.max_pool2d(tc.relu(x), 2) end,
  max_pool2d_ceil_pad = function(x) return tc.max_pool2d(x, 3, 2, 1, 1, true) end,
  avg_pool2d_ceil_no_count = function(x) return tc.avg_pool2d(x, 3, 2, 1, true, false) end,
  avg_pool2d_divisor = function(x) return tc.avg_pool2d(x, 2, nil, 0, false, true, 3) end,
  adaptive_avg_pool2d = function(x) return tc.adaptive_avg_pool2d(x, {2, 3}) end,
  adaptive_max_pool2d = function(x) return tc.adaptive_max_pool2d(x, {2, 2}) end,
  conv2d_groups_stride = function(x, w, b) return tc.conv2d(x, w, b, 2, 1, 1, 2) end,
  conv2d_dilation = function(x, w) return tc.conv2d(x, w, nil, 1, 2, 2) end,
  conv_transpose2d = function(x, w, b) return tc.conv_transpose2d(x, w, b, 2, 1, 1, 2, 1) end,
  conv1d = function(x, w, b) return tc.conv1d(x, w, b, 2, 1) end,
  layer_norm = function(x, w, b) return tc.layer_norm(x, {3}, w, b) end,
  group_norm = function(x, w, b) return tc.group_norm(x, 2, w, b) end,
  batch_norm_train = function(x, w, b) return tc.batch_norm(x, w, b, tc.zeros(3, f64), tc.ones(3, f64), true) end,
  batch_norm_eval = function(x, w, b) return tc.batch_norm(x, w, b, tc.full({3}, 0.2, f64), tc.full({3}, 1.5, f64), false) end,
  embedding_padding = function(w) return tc.embedding(tc.tensor({{1, 3}, {2, 2}}), w, 2) end,
  sdpa_causal = function(q, k, v) return sdpa(q, k, v, true) end,
  gelu_tanh = function(x) return tc.gelu(x, {approximate = "tanh"}) end,
  softplus_beta_threshold = function(x) return tc.softplus(x, 2, 1) end,
  elu_leaky = function(x) return tc.elu(x, 0.7) + tc.leaky_relu(x, 0.2) end,
  relu_abs_at_zero = function(x) return tc.relu(x) + x:abs() end,
  clamp_hardtanh_boundaries = function(x) return x:clamp(-0.5, 0.5) + tc.hardtanh(x, -0.5, 0.5) end,
  maximum_minimum_ties = function(x, y) return tc.maximum(x, y) + tc.minimum(x, y) * 3 end,
  amax_ties = function(x) return x:amax(2) end,
  max_dim_ties = function(x) return (x:max(2)) end,
  reductions = function(x) return x:norm(3, 2) + x:var(2, {correction = 0}) + x:std(2) + x:logsumexp(2) + x:prod(2) end,
  cumsum_sort_topk = function(x) return x:cumsum(2) * 2 + (x:sort(2)) + (x:topk(4, 2)) end,
  bce = function(x, y) return tc.binary_cross_entropy(x, y) end,
  bce_with_logits_pos_weight = function(x, y, p) return tc.binary_cross_entropy_with_logits(x, y, nil, {pos_weight = p}) end,
  interpolate_nearest = function(x) return tc.interpolate(x, {5, 3}) end,
  interpolate_nearest_scale = function(x) return tc.interpolate(x, nil, 2.0) end,
  matmul_broadcast = function(a, b) return a:matmul(b) end,
  pad_where_masked_fill = function(x)
    return tc.where(x:gt(0), x * 2, x):masked_fill(x:lt(-0.5), 1.0) + tc.pad(x, {1, 0})[{ {}, {2, -1} }] end,
  mse_l1 = function(x, y) return tc.mse_loss(x, y) + tc.l1_loss(x, y, "sum") end,
}

local T = {}

function T.every_fixture_case_has_a_lua_twin()
  for _, c in ipairs(load()) do assert(F[c.name], "no Lua function for fixture case " .. c.name) end
end

function T.gradients_match_pytorch()
  local failures = {}
  for _, c in ipairs(load()) do
    local xs = {}
    for i, inp in ipairs(c.inputs) do
      xs[i] = t(inp.values):view(inp.shape)
      if c.requires_grad[i] then xs[i]:requires_grad_() end
    end
    local ok, err = pcall(function()
      local y = F[c.name](table.unpack(xs))
      local w = tc.arange(0, y:numel(), f64):cos():view(y.shape)
      local diff = {}
      for i, x in ipairs(xs) do if x.requires_grad then diff[#diff + 1] = x end end
      local g = tc.autograd.grad((y * w):sum(), diff, {allow_unused = true})
      local k = 0
      for i, x in ipairs(xs) do
        if x.requires_grad then
          k = k + 1
          local got = g[k] and g[k]:reshape(-1) or tc.zeros(x:numel(), f64)
          local want = t(c.grads[i])
          local d = (got - want):abs():amax():item()
          if not (d <= 1e-9 + 1e-7 * want:abs():amax():item()) then
            error(("input %d: max |difference| %g\ngot  %s\nwant %s"):format(i, d, tostring(got), tostring(want)))
          end
        end
      end
    end)
    if not ok then failures[#failures + 1] = c.name .. ": " .. tostring(err) end
  end
  if #failures > 0 then error(table.concat(failures, "\n")) end
end

return T
