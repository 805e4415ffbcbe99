-- tc.nn layers against PyTorch 1.13 (fixtures: tests/fixtures/gen_nn_parity.py ->
-- tests/fixtures/parity/layers.safetensors). Each case builds the layer as PyTorch's generator
-- did, loads PyTorch's state_dict through tc.utils.from_torch_state_dict (strict: the parameter
-- names and shapes must match PyTorch's), runs it and compares every output.
local tc = require "tc"
local nn = require "tc.nn"

local here = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "."
local FIXTURE = here .. "/../fixtures/parity/layers.safetensors"

local fixture
local function load_fixture()
  if fixture == nil then fixture = tc.load(FIXTURE) end
  return fixture
end

-- The case's tensors by role: p (PyTorch keys), in, out, after.
local function parts(name)
  local r = {p = {}, ["in"] = {}, out = {}, after = {}}
  local prefix = name .. "/"
  for key, t in pairs(load_fixture()) do
    if key:sub(1, #prefix) == prefix then
      local role, rest = key:sub(#prefix + 1):match("^([^/]+)/(.*)$")
      rest = tonumber(rest) or rest
      r[role][rest] = t
    end
  end
  assert(next(r.out), "no fixture for case " .. name)
  return r
end

-- |got - want| <= atol + rtol * |want| everywhere, same shape and dtype.
local function assert_close(got, want, what, rtol, atol)
  rtol, atol = rtol or 1e-4, atol or 1e-5
  assert(tc.is_tensor(got), what .. ": expected a tensor, got " .. type(got))
  if got.shape ~= want.shape then
    error(("%s: shape %s, expected %s"):format(what, tostring(got.shape), tostring(want.shape)), 2)
  end
  if got.dtype ~= want.dtype then
    error(("%s: dtype %s, expected %s"):format(what, tostring(got.dtype), tostring(want.dtype)), 2)
  end
  if not want.dtype.is_floating_point then
    if not got:eq(want):all():item() then error(what .. ": values differ", 2) end
    return
  end
  local g, w = got:double(), want:double()
  local excess = ((g - w):abs() - (w:abs() * rtol + atol)):amax():item()
  if excess > 0 or excess ~= excess then
    error(("%s: max |difference| %.3g exceeds the tolerance (rtol %g, atol %g)"):format(
      what, (g - w):abs():amax():item(), rtol, atol), 2)
  end
end

local function ids(t) return t + 1 end  -- PyTorch's 0-based ids and class targets -> tc's 1-based

-- name -> {make(P) -> module, inputs(I, P) -> args (default: I[1], I[2] ...), train, after, tol}
local cases = {
  linear = {make = function() return nn.Linear(5, 3) end},
  linear_nobias_3d = {make = function() return nn.Linear(5, 3, {bias = false}) end},
  bilinear = {make = function() return nn.Bilinear(3, 4, 2) end},
  conv1d = {make = function() return nn.Conv1d(4, 6, 3, {stride = 2, padding = 1}) end},
  conv1d_groups = {make = function() return nn.Conv1d(4, 6, 3, {dilation = 2, groups = 2, bias = false}) end},
  conv2d = {make = function() return nn.Conv2d(4, 6, 3, {padding = 1}) end},
  conv2d_stride_groups = {make = function()
    return nn.Conv2d(4, 6, {3, 2}, {stride = 2, padding = {1, 0}, groups = 2, bias = false})
  end},
  conv2d_same = {make = function() return nn.Conv2d(4, 5, 3, {padding = "same", dilation = 2}) end},
  conv_transpose2d = {make = function()
    return nn.ConvTranspose2d(4, 6, 3, {stride = 2, padding = 1, output_padding = 1})
  end},
  batchnorm1d_train = {make = function() return nn.BatchNorm1d(4) end, train = true},
  batchnorm1d_train_3d = {make = function() return nn.BatchNorm1d(4, {momentum = 0.3}) end, train = true},
  batchnorm1d_eval = {make = function() return nn.BatchNorm1d(4) end},
  batchnorm2d_train = {make = function() return nn.BatchNorm2d(4) end, train = true},
  batchnorm2d_eval = {make = function() return nn.BatchNorm2d(4, {eps = 1e-3}) end},
  layernorm = {make = function() return nn.LayerNorm({4, 5}) end},
  groupnorm = {make = function() return nn.GroupNorm(2, 6) end},
  rmsnorm = {make = function() return nn.RMSNorm(8) end},
  rmsnorm_eps = {make = function() return nn.RMSNorm({2, 4}, {eps = 1e-2}) end},
  embedding = {make = function() return nn.Embedding(10, 4) end, inputs = function(I) return ids(I[1]) end},
  embedding_padding = {make = function() return nn.Embedding(10, 4, {padding_idx = 3}) end,
                       inputs = function(I) return ids(I[1]) end},
  relu = {make = function() return nn.ReLU() end},
  gelu = {make = function() return nn.GELU() end},
  gelu_tanh = {make = function() return nn.GELU({approximate = "tanh"}) end},
  silu = {make = function() return nn.SiLU() end},
  sigmoid = {make = function() return nn.Sigmoid() end},
  tanh = {make = function() return nn.Tanh() end},
  softmax = {make = function() return nn.Softmax(2) end},
  softmax_last = {make = function() return nn.Softmax(-1) end},
  leaky_relu = {make = function() return nn.LeakyReLU(0.2) end},
  identity = {make = function() return nn.Identity() end},
  flatten = {make = function() return nn.Flatten() end},
  flatten_2_3 = {make = function() return nn.Flatten(1, 2) end},
  dropout_eval = {make = function() return nn.Dropout(0.5) end},
  maxpool2d = {make = function() return nn.MaxPool2d(3, {stride = 2, padding = 1}) end},
  maxpool2d_ceil = {make = function() return nn.MaxPool2d(2, {ceil_mode = true}) end},
  avgpool2d = {make = function() return nn.AvgPool2d(2) end},
  avgpool2d_pad = {make = function() return nn.AvgPool2d(3, {stride = 2, padding = 1, count_include_pad = false}) end},
  adaptive_avg_pool2d = {make = function() return nn.AdaptiveAvgPool2d({2, 3}) end},
  adaptive_avg_pool2d_1 = {make = function() return nn.AdaptiveAvgPool2d(1) end},
  mha = {make = function() return nn.MultiheadAttention(8, 2) end,
         inputs = function(I) return I[1], I[2], I[3], {need_weights = false} end},
  mha_self = {make = function() return nn.MultiheadAttention(8, 4) end,
              inputs = function(I) return I[1], I[1], I[1] end},
  mha_batch_first = {make = function() return nn.MultiheadAttention(8, 2, {batch_first = true}) end,
                     inputs = function(I) return I[1], I[1], I[1], {need_weights = false} end},
  mha_mask = {make = function() return nn.MultiheadAttention(8, 2) end,
              inputs = function(I) return I[1], I[1], I[1], {attn_mask = I.mask} end},
  transformer_encoder = {make = function()
    return nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0})
  end},
  transformer_encoder_gelu_norm_first = {make = function()
    return nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 12, dropout = 0, activation = "gelu",
                                             norm_first = true, batch_first = true})
  end},
  cross_entropy = {make = function() return nn.CrossEntropyLoss() end,
                   inputs = function(I) return I[1], ids(I[2]) end},
  cross_entropy_sum_weight = {make = function(P) return nn.CrossEntropyLoss({weight = P.weight, reduction = "sum"}) end,
                              inputs = function(I) return I[1], ids(I[2]) end},
  cross_entropy_none_smooth = {make = function() return nn.CrossEntropyLoss({reduction = "none", label_smoothing = 0.1}) end,
                               inputs = function(I) return I[1], ids(I[2]) end},
  cross_entropy_ignore = {make = function() return nn.CrossEntropyLoss({ignore_index = 3}) end,
                          inputs = function(I) return I[1], ids(I[2]) end},
  cross_entropy_4d = {make = function() return nn.CrossEntropyLoss() end,
                      inputs = function(I) return I[1], ids(I[2]) end},
  nll = {make = function() return nn.NLLLoss() end, inputs = function(I) return I[1], ids(I[2]) end},
  nll_weight = {make = function(P) return nn.NLLLoss({weight = P.weight}) end,
                inputs = function(I) return I[1], ids(I[2]) end},
  mse = {make = function() return nn.MSELoss() end},
  mse_sum = {make = function() return nn.MSELoss({reduction = "sum"}) end},
  l1 = {make = function() return nn.L1Loss() end},
  l1_none = {make = function() return nn.L1Loss({reduction = "none"}) end},
  bce_logits = {make = function() return nn.BCEWithLogitsLoss() end},
  bce_logits_pos_weight = {make = function(P) return nn.BCEWithLogitsLoss({pos_weight = P.pos_weight}) end},
}

local function run_case(name, c)
  local f = parts(name)
  local m = c.make(f.p)
  if next(f.p) then m:load_state_dict(tc.utils.from_torch_state_dict(f.p)) end
  m:train(c.train == true)
  local args
  if c.inputs then
    args = table.pack(c.inputs(f["in"], f.p))
  else
    args = table.pack(table.unpack(f["in"]))
  end
  local out = table.pack(tc.no_grad(function() return m(table.unpack(args, 1, args.n)) end))
  for i, want in ipairs(f.out) do assert_close(out[i], want, name .. " output " .. i) end
  local sd = m:state_dict()
  for key, want in pairs(f.after) do
    assert_close(sd[key], want, name .. " " .. key .. " after forward")
  end
  if c.train then assert(next(f.after) == nil or f.after.num_batches_tracked, name .. ": no running stats to check") end
end

local tests = {}
for name, c in pairs(cases) do
  tests["parity_" .. name] = function() run_case(name, c) end
end

-- Every case of the fixture has a Lua counterpart (so a new generator case is not silently skipped).
function tests.every_fixture_case_is_tested()
  local seen = {}
  for key in pairs(load_fixture()) do seen[key:match("^([^/]+)/")] = true end
  for name in pairs(seen) do assert(cases[name], "fixture case '" .. name .. "' has no Lua test") end
end

function tests.batchnorm_train_updates_running_stats_like_pytorch()
  local f = parts("batchnorm2d_train")
  assert(f.after.running_mean and f.after.running_var and f.after.num_batches_tracked)
  run_case("batchnorm2d_train", cases.batchnorm2d_train)
end

function tests.batchnorm_eval_leaves_running_stats()
  local bn = nn.BatchNorm2d(3)
  bn:eval()
  bn(tc.randn(2, 3, 4, 4) * 5 + 2)
  assert(bn.running_mean:eq(0):all():item() and bn.running_var:eq(1):all():item())
  assert(bn.num_batches_tracked:item() == 0)
  bn:train()
  bn(tc.randn(2, 3, 4, 4) * 5 + 2)
  assert(not bn.running_mean:eq(0):all():item())
  assert(bn.num_batches_tracked:item() == 1)
end

-- F.batch_norm's num_batches_tracked (tc's keyword, what BatchNorm layers pass): counted once per
-- training call, inside the op, never in eval; and so in a compiled function, with the count
-- a compiled graph makes equal to eager's.
function tests.batch_norm_counts_batches_when_training()
  local n, rm, rv = tc.tensor(5), tc.zeros(3), tc.ones(3)
  local x = tc.randn(4, 3, 2)
  tc.batch_norm(x, nil, nil, rm, rv, true, 0.1, 1e-5, {num_batches_tracked = n})
  assert(n:item() == 6, "one training call counts once")
  tc.batch_norm(x, nil, nil, rm, rv, false, 0.1, 1e-5, {num_batches_tracked = n})
  assert(n:item() == 6, "eval does not count")
  local bn = nn.BatchNorm2d(3)
  local f = tc.compile(function(y) return bn(y) end)
  for _ = 1, 3 do f(tc.randn(2, 3, 4, 4)) end
  assert(bn.num_batches_tracked:item() == 3, "compiled: " .. bn.num_batches_tracked:item())
end

function tests.batchnorm_rejects_wrong_rank()
  local ok, e = pcall(function() return nn.BatchNorm2d(3)(tc.randn(2, 3, 4)) end)
  assert(not ok and type(e) == "table" and e.kind == "ValueError", tostring(e))
  assert(e.message:find("expected 4D input %(got 3D input%)"), e.message)
end

function tests.dropout_train_zeroes_and_scales()
  local d = nn.Dropout(0.5)
  local y = d(tc.ones(2000))
  local zeros = y:eq(0):sum():item()
  assert(zeros > 800 and zeros < 1200, "dropped " .. zeros .. " of 2000")
  assert(y:eq(0):logical_or(y:eq(2)):all():item(), "kept values must be scaled by 1/(1-p)")
  d:eval()
  assert(d(tc.ones(5)):eq(1):all():item())
end

function tests.mha_returns_averaged_weights()
  local m = nn.MultiheadAttention(8, 2)
  local x = tc.randn(5, 3, 8)
  local out, w = m(x, x, x)
  assert(out.shape == tc.Size({5, 3, 8}))
  assert(w.shape == tc.Size({3, 5, 5}), tostring(w.shape))
  assert_close(w:sum(-1), tc.ones(3, 5), "attention weights sum to 1")
  local out2, w2 = m(x, x, x, {need_weights = false})
  assert(w2 == nil)
  assert_close(out2, out, "need_weights=false gives the same output")
end

function tests.default_init_ranges_like_pytorch()
  local l = nn.Linear(50, 7)
  local b = 1 / math.sqrt(50)
  assert(l.weight:abs():amax():item() <= b and l.bias:abs():amax():item() <= b)
  assert(l.weight:abs():amax():item() > b * 0.8, "kaiming-uniform fills the whole range")
  local c = nn.Conv2d(4, 6, 3, {groups = 2})
  assert(c.weight.shape == tc.Size({6, 2, 3, 3}))
  assert(c.weight:abs():amax():item() <= 1 / math.sqrt(2 * 9))
  local bn = nn.BatchNorm2d(5)
  assert(bn.weight:eq(1):all():item() and bn.bias:eq(0):all():item())
  local e = nn.Embedding(100, 16)
  local s = e.weight:std():item()
  assert(s > 0.8 and s < 1.2, "Embedding init is N(0, 1), std " .. s)
  local ep = nn.Embedding(10, 3, {padding_idx = 2})
  assert(ep.weight[2]:eq(0):all():item(), "padding row is zero")
end

function tests.functional_forms_exist()
  local F = nn.functional
  for _, name in ipairs {"linear", "conv1d", "conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d",
                         "adaptive_avg_pool2d", "batch_norm", "layer_norm", "group_norm", "rms_norm", "embedding",
                         "scaled_dot_product_attention", "cross_entropy", "nll_loss", "mse_loss", "l1_loss",
                         "binary_cross_entropy_with_logits", "dropout", "relu", "gelu", "silu", "softmax",
                         "log_softmax", "normalize"} do
    assert(type(F[name]) == "function" or type(F[name]) == "userdata" or getmetatable(F[name]),
      "F." .. name .. " is missing")
  end
  assert(tc.nn.functional == F)
  local x = tc.tensor({{3, 4}, {0, 5}}, {dtype = tc.float32})
  assert_close(F.normalize(x, {dim = 2}), tc.tensor({{0.6, 0.8}, {0, 1}}), "normalize")
end

return tests
