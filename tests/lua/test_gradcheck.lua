-- gradcheck: every differentiable op of derivatives.def against float64 central finite
-- differences (CPU, small shapes), and second-order checks where formulas are differentiable.
-- A test per op family; each case names the op it covers.
local tc = require "tc"
local T = {}

local EPS, ATOL, RTOL = 1e-6, 1e-6, 1e-4
local f64 = {dtype = tc.float64}

local seed = 100
local function rnd(...) seed = seed + 1; tc.manual_seed(seed); return tc.randn({...}, f64) end
local function R(...) return rnd(...):requires_grad_() end
local function V(t) return t:detach():requires_grad_() end
-- away from kinks: |x| >= 0.2
local function away(t) return V(t:sign() * (t:abs() + 0.2)) end
local function pos(t) return V(t:abs() + 0.5) end

-- L(inputs) = sum(f(inputs) * w), w fixed: its gradient is one vector-Jacobian product.
local function project(out, w) return (out * w):sum() end

local function numeric(f, inputs, w, i)
  local x = inputs[i]
  local g = tc.zeros(x.shape, f64)
  local flat_g = g:view(-1)
  local n = x:numel()
  for k = 1, n do
    local vals = {}
    for _, sgn in ipairs {1, -1} do
      local xs = {}
      for j, t in ipairs(inputs) do xs[j] = tc.is_tensor(t) and t:detach():clone() or t end
      local flat = xs[i]:view(-1)
      flat[k] = flat[k]:item() + sgn * EPS
      for j, t in ipairs(inputs) do
        if tc.is_tensor(t) and t.requires_grad then xs[j]:requires_grad_() end  -- second order needs them
      end
      tc.manual_seed(4242)
      vals[sgn] = project(f(table.unpack(xs, 1, #inputs)), w):item()
    end
    flat_g[k] = (vals[1] - vals[-1]) / (2 * EPS)
  end
  return g
end

local function gradcheck(name, f, inputs)
  tc.manual_seed(4242)
  local out = f(table.unpack(inputs, 1, #inputs))
  assert(out.requires_grad, name .. ": the output does not require grad")
  seed = seed + 1
  tc.manual_seed(seed)
  local w = tc.randn(out.shape, f64)
  local diff, idx = {}, {}
  for i, t in ipairs(inputs) do
    if tc.is_tensor(t) and t.requires_grad then diff[#diff + 1] = t; idx[#idx + 1] = i end
  end
  local analytic = tc.autograd.grad(project(out, w), diff, {allow_unused = true})
  for k, i in ipairs(idx) do
    local num = numeric(f, inputs, w, i)
    local a = analytic[k] or tc.zeros(num.shape, f64)
    local err = ((a - num):abs() - (num:abs() * RTOL + ATOL)):amax():item()
    if err > 0 then
      error(("%s: gradient of input %d differs from finite differences\nanalytic:\n%s\nnumeric:\n%s"):format(
        name, i, tostring(a), tostring(num)), 2)
    end
  end
end

-- second order: gradcheck of x -> d/dx sum(f(x) * w) built with create_graph
local function gradgradcheck(name, f, inputs)
  tc.manual_seed(4242)
  local out = f(table.unpack(inputs, 1, #inputs))
  tc.manual_seed(999)
  local w = tc.randn(out.shape, f64)
  local function g(...)
    local xs = {...}
    local gr = tc.autograd.grad(project(f(table.unpack(xs, 1, #inputs)), w), xs[1], {create_graph = true})
    return gr
  end
  gradcheck(name .. " (second order)", g, inputs)
end

local function run(cases)
  for _, c in ipairs(cases) do gradcheck(c[1], c[2], c[3]) end
end

function T.pointwise_unary()
  local x = R(2, 3)
  run {
    {"neg", tc.neg, {x}}, {"abs", tc.abs, {away(x)}}, {"sqrt", tc.sqrt, {pos(x)}}, {"rsqrt", tc.rsqrt, {pos(x)}},
    {"exp", tc.exp, {x}}, {"exp2", tc.exp2, {x}}, {"log", tc.log, {pos(x)}}, {"log2", tc.log2, {pos(x)}},
    {"log1p", tc.log1p, {pos(x)}}, {"expm1", tc.expm1, {x}}, {"sin", tc.sin, {x}}, {"cos", tc.cos, {x}},
    {"tan", tc.tan, {V(x * 0.3)}}, {"tanh", tc.tanh, {x}}, {"sigmoid", tc.sigmoid, {x}}, {"relu", tc.relu, {away(x)}},
    {"gelu", tc.gelu, {x}}, {"gelu_tanh", function(a) return tc.gelu(a, {approximate = "tanh"}) end, {x}},
    {"silu", tc.silu, {x}}, {"softplus", function(a) return tc.softplus(a, 2, 1) end, {away(x)}},
    {"leaky_relu", function(a) return tc.leaky_relu(a, 0.1) end, {away(x)}}, {"elu", tc.elu, {away(x)}},
    {"hardtanh", function(a) return tc.hardtanh(a, -0.5, 0.5) end, {V(x * 0.3)}},
    {"clamp", function(a) return tc.clamp(a, -0.5, 0.7) end, {away(x)}},
    {"reciprocal", tc.reciprocal, {away(x)}}, {"erf", tc.erf, {x}},
    {"floor", function(a) return tc.floor(a) + a end, {away(x)}},
    -- zero gradients, as PyTorch's (inputs away from the steps)
    {"ceil", function(a) return tc.ceil(a) + a end, {V(x:floor() + 0.4)}},
    {"round", function(a) return tc.round(a) * a end, {V(x:floor() + 0.3)}},
    {"trunc", function(a) return tc.trunc(a) + a end, {V(x:floor() + 0.6)}},
    {"sign", function(a) return tc.sign(a) * a end, {away(x)}},
    {"to_device", function(a) return a:to("cpu") * a end, {x}},
    {"to_dtype", function(a) return a:to(tc.float64) * 2 end, {x}},
  }
end

function T.pointwise_binary_broadcasting()
  local a, b, c = R(2, 3), V(rnd(3)), V(rnd(2, 1))
  run {
    {"add", function(p, q) return tc.add(p, q, {alpha = 2}) end, {a, b}},
    {"sub", function(p, q) return tc.sub(p, q, {alpha = 3}) end, {a, c}},
    {"mul", tc.mul, {a, b}}, {"div", tc.div, {a, away(c)}},
    {"remainder", tc.remainder, {V(a:abs() + 0.1), V(tc.full({3}, 0.7, f64))}},
    {"pow", tc.pow, {pos(a), b}}, {"pow_scalar", function(p) return p ^ 3 end, {a}},
    {"minimum", tc.minimum, {a, b}}, {"maximum", tc.maximum, {a, c}},
    {"where", function(p, q) return tc.where(p:gt(0), p, q) end, {a, b}},
    {"masked_fill", function(p) return p:masked_fill(p:gt(0.5), 2) end, {a}},
    {"lerp", tc.lerp, {a, b, V(rnd(2, 3):sigmoid())}},
    {"scalar_ops", function(p) return (2 - p) / 3 + 1 / (p * p + 1) end, {a}},
  }
end

function T.reductions()
  local x = R(3, 4)
  run {
    {"sum", function(a) return a:sum() end, {x}}, {"sum_dim", function(a) return a:sum(2) end, {x}},
    {"sum_dims_keepdim", function(a) return a:sum({1, 2}, {keepdim = true}) end, {x}},
    {"mean", function(a) return a:mean(-1) end, {x}}, {"prod", function(a) return a:prod(1) end, {away(x)}},
    {"amax", function(a) return a:amax(2) end, {x}}, {"amin", function(a) return a:amin() end, {x}},
    {"max_dim", function(a) return (a:max(2)) end, {x}}, {"min_dim", function(a) return (a:min(1, {keepdim = true})) end, {x}},
    {"var", function(a) return a:var(2) end, {x}}, {"std", function(a) return a:std(1, {correction = 0}) end, {x}},
    {"var_mean", function(a) local v, m = a:var_mean(2); return v + m * 3 end, {x}},
    {"norm", function(a) return a:norm(2, 2) end, {x}}, {"norm_p1", function(a) return a:norm(1) end, {away(x)}},
    {"norm_p3", function(a) return a:norm(3, 1) end, {x}},
    {"norm_pinf", function(a) return a:norm(math.huge, 2) end, {x}},
    {"norm_pneginf", function(a) return a:norm(-math.huge) end, {away(x)}},
    {"logsumexp", function(a) return a:logsumexp(2) end, {x}}, {"cumsum", function(a) return a:cumsum(2) end, {x}},
    {"softmax", function(a) return a:softmax(2) end, {x}}, {"log_softmax", function(a) return a:log_softmax(1) end, {x}},
    {"sort", function(a) return (a:sort(2)) end, {x}}, {"topk", function(a) return (a:topk(2, 2)) end, {x}},
  }
end

function T.views()
  local x = R(2, 3, 4)
  run {
    {"view", function(a) return a:view(6, 4) end, {x}}, {"reshape", function(a) return a:reshape(4, -1) end, {x}},
    {"permute", function(a) return a:permute(3, 1, 2) end, {x}}, {"transpose", function(a) return a:transpose(1, 3) end, {x}},
    {"t", function(a) return a:t() end, {V(rnd(2, 3))}}, {"narrow", function(a) return a:narrow(3, 2, 2) end, {x}},
    {"select", function(a) return a:select(2, -1) end, {x}}, {"slice_step", function(a) return a[{ {}, {}, {1, 4, 2} }] end, {x}},
    {"slice", function(a) return a[{ {}, {2, 3} }] end, {x}},
    {"expand", function(a) return a:expand(2, 3, 4) end, {V(rnd(3, 1))}},
    {"squeeze", function(a) return a:squeeze() end, {V(rnd(2, 1, 3))}}, {"unsqueeze", function(a) return a:unsqueeze(2) end, {x}},
    {"flatten", function(a) return a:flatten(2) end, {x}},
    {"unbind", function(a) local p = a:unbind(2); return p[1] * p[3] end, {x}},
    {"split", function(a) local p = a:split(3, 3); return p[2] end, {x}},
    {"split_with_sizes", function(a) local p = a:split({1, 3}, 3); return p[2] * 2 end, {x}},
    {"chunk", function(a) local p = a:chunk(2, 1); return p[1] - p[2] end, {x}},
  }
end

function T.movement()
  local x = R(2, 3)
  run {
    {"contiguous", function(a) return a:t():contiguous() end, {x}}, {"clone", function(a) return a:clone() end, {x}},
    {"cat", function(a, b) return tc.cat({a, b, a}, 1) end, {x, V(rnd(1, 3))}},
    {"stack", function(a, b) return tc.stack({a, b}, 2) end, {x, V(rnd(2, 3))}},
    {"flip", function(a) return a:flip({1, 2}) end, {x}}, {"roll", function(a) return a:roll({1}, {2}) end, {x}},
    {"repeat", function(a) return a["repeat"](a, 2, 1, 2) end, {x}},
    {"pad", function(a) return tc.pad(a, {1, 2, 0, 1}) end, {x}},
    {"pad_crop", function(a) return tc.pad(a, {-1, 1}) end, {x}},
    {"tril", function(a) return a:tril() end, {V(rnd(3, 3))}}, {"triu", function(a) return a:triu(1) end, {V(rnd(3, 3))}},
    {"index_select", function(a) return a:index_select(2, tc.tensor({3, 1, 3})) end, {x}},
    {"gather", function(a) return a:gather(2, tc.tensor({{1, 1}, {3, 2}})) end, {x}},
    {"scatter", function(a, s) return a:scatter(2, tc.tensor({{1}, {3}}), s) end, {x, V(rnd(2, 1))}},
    {"scatter_add", function(a, s) return a:scatter_add(2, tc.tensor({{1, 1}, {3, 2}}), s) end, {x, V(rnd(2, 2))}},
    {"masked_select", function(a) return a:masked_select(tc.tensor({true, false, true})) end, {x}},
    {"index_tensor", function(a) return a[tc.tensor({2, 1, 2})] end, {x}},
    {"copy_into_non_leaf", function(a, b) local c = a * 1; c:copy_(b); return c * a end, {x, V(rnd(3))}},
  }
end

function T.contractions()
  run {
    {"matmul_2d", tc.matmul, {R(2, 3), V(rnd(3, 4))}},
    {"matmul_batch_broadcast", tc.matmul, {R(2, 2, 3), V(rnd(3, 2))}},
    {"matmul_vec_mat", tc.matmul, {R(3), V(rnd(2, 3, 2))}}, {"matmul_mat_vec", tc.matmul, {R(2, 3), V(rnd(3))}},
    {"matmul_dot", tc.matmul, {R(3), V(rnd(3))}},
    {"einsum_matmul", function(a, b) return tc.einsum("ij,jk->ik", {a, b}) end, {R(2, 3), V(rnd(3, 2))}},
    {"einsum_batch_implicit", function(a, b) return tc.einsum("bij,bjk", {a, b}) end, {R(2, 2, 3), V(rnd(2, 3, 2))}},
    {"einsum_ellipsis", function(a, b) return tc.einsum("...ij,...jk->...ik", {a, b}) end, {R(2, 2, 3), V(rnd(2, 3, 2))}},
    {"einsum_summed_label", function(a, b) return tc.einsum("ijk,i->j", {a, b}) end, {R(2, 3, 2), V(rnd(2))}},
    {"einsum_outer_three", function(a, b, c) return tc.einsum("i,j,k->ijk", {a, b, c}) end, {R(2), V(rnd(3)), V(rnd(2))}},
    {"mm", tc.mm, {R(2, 3), V(rnd(3, 2))}}, {"bmm", tc.bmm, {R(2, 2, 3), V(rnd(2, 3, 2))}},
    {"linear", tc.linear, {R(2, 2, 3), V(rnd(4, 3)), V(rnd(4))}}, {"linear_1d", tc.linear, {R(3), V(rnd(4, 3))}},
    {"addmm", function(s, a, b) return tc.addmm(s, a, b, {beta = 0.5, alpha = 2}) end, {R(2), V(rnd(2, 3)), V(rnd(3, 2))}},
    {"baddbmm", function(s, a, b) return tc.baddbmm(s, a, b, {alpha = 0.5}) end, {R(2, 1, 2), V(rnd(2, 2, 3)), V(rnd(2, 3, 2))}},
  }
end

function T.convolution_and_pooling()
  run {
    {"conv2d", function(x, w, b) return tc.conv2d(x, w, b) end, {R(1, 2, 4, 4), V(rnd(3, 2, 2, 2)), V(rnd(3))}},
    {"conv2d_stride_pad_dilation", function(x, w) return tc.conv2d(x, w, nil, 2, 1, 2) end, {R(2, 2, 5, 5), V(rnd(2, 2, 2, 2))}},
    {"conv2d_groups", function(x, w) return tc.conv2d(x, w, nil, 1, 1, 1, 2) end, {R(1, 4, 3, 3), V(rnd(4, 2, 3, 3))}},
    {"conv2d_same", function(x, w) return tc.conv2d(x, w, nil, 1, "same") end, {R(1, 1, 4, 4), V(rnd(2, 1, 2, 2))}},
    {"conv2d_stride_uneven", function(x, w) return tc.conv2d(x, w, nil, {2, 3}) end, {R(1, 1, 6, 7), V(rnd(1, 1, 3, 2))}},
    {"conv1d", function(x, w, b) return tc.conv1d(x, w, b, 2, 1) end, {R(2, 2, 7), V(rnd(3, 2, 3)), V(rnd(3))}},
    {"conv_transpose2d", function(x, w, b) return tc.conv_transpose2d(x, w, b, 2, 1, 1) end,
     {R(1, 2, 3, 3), V(rnd(2, 3, 3, 3)), V(rnd(3))}},
    {"conv_transpose2d_groups_dilation", function(x, w) return tc.conv_transpose2d(x, w, nil, 1, 0, 0, 2, 2) end,
     {R(1, 4, 3, 2), V(rnd(4, 1, 2, 2))}},
    {"max_pool2d", function(x) return tc.max_pool2d(x, 2) end, {R(1, 2, 4, 4)}},
    {"max_pool2d_pad_stride_ceil", function(x) return tc.max_pool2d(x, 3, 2, 1, 1, true) end, {R(1, 1, 6, 6)}},
    {"avg_pool2d", function(x) return tc.avg_pool2d(x, 2) end, {R(1, 2, 4, 4)}},
    {"avg_pool2d_pad_no_count", function(x) return tc.avg_pool2d(x, 3, 2, 1, true, false) end, {R(1, 1, 6, 5)}},
    {"adaptive_avg_pool2d", function(x) return tc.adaptive_avg_pool2d(x, {2, 3}) end, {R(1, 2, 5, 4)}},
    {"adaptive_max_pool2d", function(x) return tc.adaptive_max_pool2d(x, {2, 2}) end, {R(1, 1, 5, 4)}},
  }
end

function T.normalization_and_nn()
  run {
    {"batch_norm_train", function(x, w, b) return tc.batch_norm(x, w, b, tc.zeros(3, f64), tc.ones(3, f64), true) end,
     {R(4, 3, 2), V(rnd(3)), V(rnd(3))}},
    {"batch_norm_eval", function(x, w, b) return tc.batch_norm(x, w, b, tc.full({3}, 0.1, f64), tc.full({3}, 2, f64), false) end,
     {R(4, 3), V(rnd(3)), V(rnd(3))}},
    {"layer_norm", function(x, w, b) return tc.layer_norm(x, {2, 3}, w, b) end, {R(2, 2, 3), V(rnd(2, 3)), V(rnd(2, 3))}},
    {"group_norm", function(x, w, b) return tc.group_norm(x, 2, w, b) end, {R(2, 4, 3), V(rnd(4)), V(rnd(4))}},
    {"rms_norm", function(x, w) return tc.rms_norm(x, {3}, w) end, {R(2, 3), V(rnd(3))}},
    {"embedding", function(w) return tc.embedding(tc.tensor({{1, 3}, {3, 2}}), w) end, {R(4, 3)}},
    -- padding_idx: its row gets no gradient by definition (checked against PyTorch instead)
    {"sdpa", function(q, k, v) return tc.scaled_dot_product_attention(q, k, v) end, {R(1, 3, 2), V(rnd(1, 4, 2)), V(rnd(1, 4, 2))}},
    {"sdpa_causal", function(q, k, v) return tc.scaled_dot_product_attention(q, k, v, nil, 0, true) end,
     {R(2, 3, 2), V(rnd(2, 3, 2)), V(rnd(2, 3, 2))}},
    {"sdpa_float_mask", function(q, k, v, m) return tc.scaled_dot_product_attention(q, k, v, m) end,
     {R(3, 2), V(rnd(3, 2)), V(rnd(3, 2)), V(rnd(3, 3))}},
    {"interpolate_nearest", function(x) return tc.interpolate(x, {5, 3}) end, {R(1, 1, 3, 2)}},
    {"interpolate_bilinear", function(x) return tc.interpolate(x, {5, 3}, nil, "bilinear", false) end, {R(1, 2, 3, 2)}},
    {"interpolate_bilinear_align_corners", function(x) return tc.interpolate(x, {4, 5}, nil, "bilinear", true) end,
     {R(2, 1, 3, 2)}},
    {"interpolate_bilinear_scale_factor", function(x) return tc.interpolate(x, nil, {1.5, 0.5}, "bilinear") end,
     {R(1, 1, 2, 4)}},
    {"dropout", function(x) return tc.dropout(x, 0.3, true) end, {R(4, 4)}},
    {"sdpa_dropout", function(q, k, v) return tc.scaled_dot_product_attention(q, k, v, nil, 0.3, false) end,
     {R(2, 3, 2), V(rnd(2, 4, 2)), V(rnd(2, 4, 2))}},
  }
end

function T.losses()
  local target = tc.tensor({1, 3, 2, 3})
  run {
    {"cross_entropy", function(x) return tc.cross_entropy(x, target) end, {R(4, 3)}},
    {"cross_entropy_weight_ignore_smoothing", function(x, w)
      return tc.cross_entropy(x, tc.tensor({1, 3, 2, 2}), w, {ignore_index = 2, label_smoothing = 0.2}) end,
     {R(4, 3), rnd(3):abs() + 0.5}},
    {"cross_entropy_probs", function(x, p) return tc.cross_entropy(x, p, nil, {label_smoothing = 0.1}) end,
     {R(2, 3), V(rnd(2, 3):softmax(2))}},
    {"cross_entropy_sum_spatial", function(x) return tc.cross_entropy(x, tc.tensor({{1, 2}, {3, 3}}), nil, "sum") end, {R(2, 3, 2)}},
    {"nll_loss", function(x, w) return tc.nll_loss(x, target, w) end, {R(4, 3), rnd(3):abs()}},
    {"nll_loss_none", function(x) return tc.nll_loss(x, target, nil, "none") end, {R(4, 3)}},
    {"mse_loss", tc.mse_loss, {R(2, 3), V(rnd(2, 3))}},
    {"l1_loss", function(a, b) return tc.l1_loss(a, b, "sum") end, {R(2, 3), V(rnd(2, 3) + 3)}},
    {"binary_cross_entropy", function(x, t, w) return tc.binary_cross_entropy(x, t, w) end,
     {V(rnd(2, 3):sigmoid()), V(rnd(2, 3):sigmoid()), rnd(2, 3):abs()}},
    {"bce_with_logits", function(x, t, pw) return tc.binary_cross_entropy_with_logits(x, t, nil, {pos_weight = pw}) end,
     {R(2, 3), V(rnd(2, 3):sigmoid()), V(rnd(3):abs())}},
  }
end

function T.second_order()
  local x = R(2, 3)
  for _, c in ipairs {
    {"mul", function(a) return a * a * a end}, {"exp", tc.exp}, {"tanh", tc.tanh}, {"sigmoid", tc.sigmoid},
    {"log_softmax", function(a) return a:log_softmax(2) end}, {"softmax", function(a) return a:softmax(1) end},
    {"matmul", function(a) return a:matmul(a:t()) end}, {"gelu", tc.gelu}, {"silu", tc.silu},
    {"layer_norm", function(a) return tc.layer_norm(a, {3}) end},
    {"cross_entropy", function(a) return tc.cross_entropy(a, tc.tensor({1, 3})) end},
    {"sum_mean_var", function(a) return a:var(2) + a:mean() end},
  } do
    gradgradcheck(c[1], c[2], {x})
  end
  -- conv2d's backward is conv_transpose2d, whose backward is conv2d again
  local w = rnd(3, 2, 2, 2)
  gradgradcheck("conv2d", function(a) return tc.conv2d(a, w, nil, 2, 1) * a:sum() end, {R(1, 2, 4, 4)})
end

-- A gradient-norm penalty over a 2-layer CNN: the parameters' gradients (built with create_graph,
-- through conv2d's _conv2d_weight_backward) are differentiated again, by input and by weights.
function T.gradient_penalty_over_a_two_layer_cnn()
  local target = rnd(2, 2, 2, 2)
  local function penalty(x, w1, b1, w2)
    local h = tc.tanh(tc.conv2d(x, w1, b1, 1, 1))
    local loss = ((tc.conv2d(h, w2, nil, 2) - target) ^ 2):mean()
    local gs = tc.autograd.grad(loss, {w1, b1, w2}, {create_graph = true})
    local p = loss
    for _, g in ipairs(gs) do p = p + (g * g):sum() end
    return p
  end
  gradcheck("gradient penalty", penalty, {R(2, 1, 4, 4), R(3, 1, 3, 3), R(3), R(2, 3, 2, 2)})
end

return T
