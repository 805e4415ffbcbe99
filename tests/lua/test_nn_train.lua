-- tc.nn's training behaviour: batch norm over several batches in train then eval mode against
-- PyTorch (fixture: tests/fixtures/train/nn_train.json from gen_nn_train.py), dropout by mode.
local tc = require "tc"
local nn = require "tc.nn"
local json = require "json"
local check = require "check"
local OF = require "fixtures"

local function FX() return OF.json("train/nn_train.json") end

local function options(c)
  local o = {}
  for k, v in pairs(c.options) do
    if v == json.null then o[k] = false else o[k] = v end
  end
  return o
end

local tests = {}

function tests.batchnorm_train_then_eval_matches_pytorch_call_by_call()
  local n = 0
  for name, c in pairs(FX().batchnorm) do
    local m = nn[c.class](c.args[1], options(c))
    if c.weight then
      m.weight:detach():copy_(tc.tensor(c.weight))
      m.bias:detach():copy_(tc.tensor(c.bias))
    end
    for i, call in ipairs(c.calls) do
      local what = ("%s call %d (%s)"):format(name, i, call.train and "train" or "eval")
      if call.train then m:train() else m:eval() end
      local x = OF.tensor(call.input.values, call.input.shape)
      local y = m(x)
      OF.assert_close(y, OF.tensor(call.output, call.input.shape), what .. " output")
      if call.running_mean then
        OF.assert_close(m.running_mean, tc.tensor(call.running_mean), what .. " running_mean")
        OF.assert_close(m.running_var, tc.tensor(call.running_var), what .. " running_var")
        check.eq(m.num_batches_tracked:item(), call.num_batches_tracked, what .. " num_batches_tracked")
      else
        assert(m.running_mean == nil, name .. ": no running statistics without track_running_stats")
      end
    end
    n = n + 1
  end
  assert(n >= 5, "the fixture has the batch norm cases")
end

function tests.batchnorm_momentum_accepts_a_number_or_false_only()
  local e = check.raises("ValueError", function() return nn.BatchNorm1d(3, {momentum = "none"}) end)
  assert(e.message:find("momentum"), e.message)
  check.eq(nn.BatchNorm2d(3, {momentum = false}).momentum, false)
end

function tests.dropout_p_zero_and_one_in_train_mode()
  local x = tc.randn(100) + 3
  local d0, d1 = nn.Dropout(0), nn.Dropout(1)
  assert(d0.training and d1.training)
  assert(d0(x):eq(x):all():item(), "p = 0 keeps everything")
  check.eq(d1(x):abs():sum():item(), 0, "p = 1 drops everything")
  assert(nn.functional.dropout(x, 0.5, false):eq(x):all():item(), "F.dropout with training = false is the identity")
end

-- A model with dropout and batch norm: eval outputs repeat exactly and leave the running stats;
-- train outputs are random and update them; m:eval()/m:train() reach every submodule.
function tests.model_eval_is_deterministic_and_train_is_not()
  local m = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 2))
  local x = tc.randn(8, 6)
  m:eval()
  local mean = m[2].running_mean:clone()
  local a, b = m(x), m(x)
  assert(a:eq(b):all():item(), "eval: the same output twice")
  assert(m[2].running_mean:eq(mean):all():item(), "eval leaves the running mean")
  m:train()
  assert(m[4].training and m[2].training)
  local c, d = m(x), m(x)
  assert(not c:eq(d):all():item(), "train: dropout makes the outputs differ")
  assert(not m[2].running_mean:eq(mean):all():item(), "train updates the running mean")
  check.eq(m[2].num_batches_tracked:item(), 2)
end

function tests.module_zero_grad_to_none_or_in_place()
  local m = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
  for _, p in ipairs(m:parameters()) do p.grad = tc.ones_like(p) end
  local g = m[1].weight.grad
  m:zero_grad({set_to_none = false})
  assert(rawequal(m[1].weight.grad, g), "the same gradient tensor")
  check.eq(g:abs():sum():item(), 0)
  m:zero_grad()
  for _, p in ipairs(m:parameters()) do assert(p.grad == nil) end
end

-- Every layer with parameters trains: after backward of a weighted sum of its output, each
-- parameter has a nonzero gradient of its shape. Needs autograd: skipped without it.
local LAYERS = {
  {"Linear", function() return nn.Linear(4, 3) end, function() return {tc.randn(2, 4)} end},
  {"Bilinear", function() return nn.Bilinear(3, 4, 2) end, function() return {tc.randn(5, 3), tc.randn(5, 4)} end},
  {"Conv1d", function() return nn.Conv1d(2, 3, 3) end, function() return {tc.randn(2, 2, 7)} end},
  {"Conv2d", function() return nn.Conv2d(2, 3, 3, {padding = 1, stride = 2}) end, function() return {tc.randn(2, 2, 6, 6)} end},
  {"ConvTranspose2d", function() return nn.ConvTranspose2d(2, 3, 3, {stride = 2}) end, function() return {tc.randn(1, 2, 4, 4)} end},
  {"BatchNorm1d", function() return nn.BatchNorm1d(3) end, function() return {tc.randn(4, 3)} end},
  {"BatchNorm2d", function() return nn.BatchNorm2d(3) end, function() return {tc.randn(2, 3, 4, 4)} end},
  {"LayerNorm", function() return nn.LayerNorm(5) end, function() return {tc.randn(3, 5)} end},
  {"GroupNorm", function() return nn.GroupNorm(2, 4) end, function() return {tc.randn(2, 4, 3)} end},
  {"RMSNorm", function() return nn.RMSNorm(5) end, function() return {tc.randn(3, 5)} end},
  {"Embedding", function() return nn.Embedding(10, 4) end, function() return {tc.tensor({{1, 2}, {3, 10}})} end},
  {"MultiheadAttention", function() return nn.MultiheadAttention(8, 2) end,
    function() local x = tc.randn(5, 2, 8); return {x, x, x} end},
  {"TransformerEncoderLayer", function() return nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16}) end,
    function() return {tc.randn(5, 2, 8)} end},
}

local function needs_autograd()
  if tc.zeros(1).backward == nil then check.skip("loss:backward() is not available in this build") end
end

function tests.every_layer_with_parameters_gets_their_gradients()
  needs_autograd()
  tc.manual_seed(0)
  for _, c in ipairs(LAYERS) do
    local m = c[2]()
    local out = m(table.unpack(c[3]()))
    ;(out * tc.randn(out.shape)):sum():backward()
    for name, p in m:named_parameters() do
      assert(p.grad ~= nil, c[1] .. "." .. name .. " has no gradient")
      check.same(p.grad.shape, p.shape, c[1] .. "." .. name .. " gradient shape")
      assert(p.grad:abs():sum():item() > 0, c[1] .. "." .. name .. " has an all-zero gradient")
    end
  end
end

-- In train mode dropout's gradient is its mask scaled by 1/(1-p): for x = 1 that is the output.
function tests.dropout_gradient_follows_its_mask()
  needs_autograd()
  local x = tc.ones(1000)
  x.requires_grad = true
  local y = nn.Dropout(0.5)(x)
  y:sum():backward()
  assert(x.grad:eq(y:detach()):all():item(), "gradient = mask / (1 - p)")
  assert(x.grad:eq(0):any():item() and x.grad:eq(2):any():item())
end

return tests
