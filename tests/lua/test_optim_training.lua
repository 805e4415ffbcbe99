-- The optimizers, a scheduler and gradient clipping together minimise a real loss: softmax
-- regression on separable generated data, with gradients computed by hand (no autograd needed),
-- through nn.Linear's parameters, both per parameter and on flat buckets.
local tc = require "tc"
local nn = require "tc.nn"
local F = nn.functional
local optim = require "tc.optim"
local check = require "check"

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

-- The optimizer keeps working on the same parameter objects after m:to()/m:float(), which
-- replace parameters only when they change: a no-op conversion keeps them.
function tests.no_op_conversion_keeps_the_optimized_parameters()
  local m = nn.Linear(4, 3)
  local w = m.weight
  local opt = optim.SGD(m:parameters(), {lr = 0.1})
  m:float()
  m:to("cpu")
  assert(rawequal(m.weight, w), "the same weight object")
  local x, y = data(16)
  loss_and_grads(m, x, y)
  local before = w:clone()
  opt:step()
  assert(not m.weight:eq(before):all():item(), "the module's weight moved")
  check.eq(#opt.param_groups[1].params, 2)
end

return tests
