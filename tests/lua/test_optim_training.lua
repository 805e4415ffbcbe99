-- The optimizers, a scheduler and gradient clipping together minimise a real loss: softmax
-- regression on separable generated data, with gradients computed by hand (no autograd needed),
-- through nn.Linear's parameters, both per parameter and on flat buckets.
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
local optim = require "tc.optim"
local check = require "check"
local OF = require "fixtures"

local function data(n)
  tc.manual_seed(1)
  local y = tc.randint(1, 4, {n})
  local centers = tc.tensor({{2, 0, 0, 1}, {0, 2, 0, -1}, {0, 0, 2, 1}})
  local x = centers:index_select(1, y) + tc.randn(n, 4) * 0.5
  return x, y
end

-- loss and hand-made gradients of cross_entropy(m(x), y) for m = nn.Linear(4, 3)
local function loss_and_grads(m, x, y)
  local logits = m(x)
  local loss = F.cross_entropy(logits, y)
  local onehot = tc.zeros(x:size(1), 3):scatter(2, y:view(-1, 1), 1)
  local d = (logits:softmax(2) - onehot) / x:size(1)
  m.weight.grad = d:t():matmul(x)
  m.bias.grad = d:sum(1)
  return loss:item()
end

local OPTIMIZERS = {
  {"SGD", {lr = 0.5, momentum = 0.9, nesterov = true, weight_decay = 1e-4}},
  {"Adam", {lr = 0.05, amsgrad = true}},
  {"AdamW", {lr = 0.05}},
  {"RMSprop", {lr = 0.01, centered = true, momentum = 0.5}},
  {"Adagrad", {lr = 0.3}},
}

local tests = {}

function tests.every_optimizer_minimises_softmax_regression()
  local x, y = data(96)
  for _, c in ipairs(OPTIMIZERS) do
    local finals = {}
    for _, foreach in ipairs {false, true} do
      tc.manual_seed(0)
      local m = nn.Linear(4, 3)
      local opts = {foreach = foreach}
      for k, v in pairs(c[2]) do opts[k] = v end
      local opt = optim[c[1]](m:parameters(), opts)
      local sched = optim.lr_scheduler.StepLR(opt, 20, {gamma = 0.5})
      local first, last
      for _ = 1, 40 do
        opt:zero_grad()
        last = loss_and_grads(m, x, y)
        first = first or last
        nn.utils.clip_grad_norm_(m:parameters(), 10.0)
        opt:step()
        sched:step()
      end
      assert(last < first * 0.1, ("%s (foreach=%s): loss %.4f -> %.4f"):format(c[1], tostring(foreach), first, last))
      finals[foreach] = m.weight:clone()
    end
    local diff = (finals[true] - finals[false]):abs():amax():item()
    assert(diff < 1e-4, ("%s: foreach and per-parameter runs differ by %g"):format(c[1], diff))
  end
end

-- m:double() (likewise m:cuda(), m:half()) after the optimizer was built: the optimizer follows the
-- converted parameters with their state converted, as if it had been built from a state_dict
-- on the converted model; zero_grad clears the new parameters' gradients.
function tests.optimizer_follows_parameters_converted_after_it_was_built()
  local x, y = data(32)
  local function two_steps()
    tc.manual_seed(0)
    local m = nn.Linear(4, 3)
    local opt = optim.Adam(m:parameters(), {lr = 0.05, amsgrad = true, foreach = true})
    for _ = 1, 2 do loss_and_grads(m, x, y); opt:step() end
    return m, opt
  end
  local a, opt_a = two_steps()
  local b, opt_b = two_steps()
  local saved = opt_b:state_dict()
  a:double()
  b:double()
  assert(rawequal(opt_a:state_dict().param_groups[1].params[1], 1))
  check.eq(opt_a.state[a.weight].exp_avg.dtype, tc.float64, "the state is converted")
  assert(rawequal(opt_a.param_groups[1].params[1], a.weight), "the group holds the new weight")
  opt_b = optim.Adam(b:parameters(), {lr = 0.05, amsgrad = true, foreach = true})
  opt_b:load_state_dict(saved)
  a.weight.grad = tc.ones(3, 4, {dtype = tc.float64})
  opt_a:zero_grad()
  assert(a.weight.grad == nil, "zero_grad reaches the converted parameters")
  for _, pair in ipairs {{a, opt_a}, {b, opt_b}} do
    local m, opt = pair[1], pair[2]
    local xd = x:double()
    local logits = m(xd)
    local onehot = tc.zeros(32, 3, {dtype = tc.float64}):scatter(2, y:view(-1, 1), 1)
    local d = (logits:softmax(2) - onehot) / 32
    m.weight.grad, m.bias.grad = d:t():matmul(xd), d:sum(1)
    opt:step()
  end
  assert(a.weight:eq(b.weight):all():item() and a.bias:eq(b.bias):all():item(), "same step as the rebuilt optimizer")
  check.eq(opt_a.state[a.bias].step, 3)
end

-- A fixed model trained by loss:backward() and each optimizer for a few steps equals PyTorch's
-- (fixture: tests/fixtures/train/optim.json, "model"). Needs autograd: skipped without it.
function tests.fixed_model_trained_with_backward_matches_pytorch()
  if tc.zeros(1).backward == nil then check.skip("loss:backward() is not available in this build") end
  local fx, cases = OF.optim().model, OF.optim().optimizers
  local function shape_of(key) return ({["0.weight"] = {5, 4}, ["0.bias"] = {5}, ["2.weight"] = {3, 5}, ["2.bias"] = {3}})[key] end
  local x, y = OF.tensor(fx.x, {6, 4}), OF.tensor(fx.y, {6, 3})
  local n = 0
  for name, steps in pairs(fx.cases) do
    local m = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3))
    local sd = {}
    for i, key in ipairs(fx.keys) do sd[key] = OF.tensor(fx.init[i], shape_of(key)) end
    m:load_state_dict(tc.utils.from_torch_state_dict(sd))
    local opt = optim[cases[name].class](m:parameters(), cases[name].options)
    for step, want in ipairs(steps) do
      opt:zero_grad()
      F.mse_loss(m(x), y):backward()
      opt:step()
      local got = m:state_dict()
      for i, key in ipairs(fx.keys) do
        local tc_key = key:gsub("^(%d+)", function(d) return tostring(tonumber(d) + 1) end)
        OF.assert_close(got[tc_key], OF.tensor(want[i], shape_of(key)), ("%s step %d %s"):format(name, step, tc_key))
      end
    end
    n = n + 1
  end
  assert(n >= 5, "the fixture has the model cases")
end

return tests
