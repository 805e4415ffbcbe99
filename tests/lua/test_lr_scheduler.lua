-- tc.optim.lr_scheduler against torch.optim.lr_scheduler (fixture: tests/fixtures/train/optim.json from
-- gen_optim.py): each case's lrs of every group after construction and after each step().
local tc = require "tc"
local optim = require "tc.optim"
local check = require "check"
local OF = require "fixtures"

-- gen_optim.py's LAMBDAS, by name
local LAMBDAS = {pow095 = function(e) return 0.95 ^ e end, inverse = function(e) return 1 / (e + 1) end}

local function sgd(lrs)
  local groups = {}
  for i, lr in ipairs(lrs) do groups[i] = {params = {tc.zeros(1)}, lr = lr} end
  return optim.SGD(groups, {lr = lrs[1]})
end

local function build(c, opt)
  local opts = {}
  for k, v in pairs(c.options) do opts[k] = v end
  if c.class == "LambdaLR" then
    local ll = opts.lr_lambda
    if type(ll) == "table" then
      opts.lr_lambda = {}
      for i, n in ipairs(ll) do opts.lr_lambda[i] = LAMBDAS[n] end
    else
      opts.lr_lambda = LAMBDAS[ll]
    end
  end
  return optim.lr_scheduler[c.class](opt, opts)
end

local function close(got, want, what)
  check.eq(#got, #want, what .. ": number of groups")
  for i = 1, #want do
    if math.abs(got[i] - want[i]) > 1e-12 * (1 + math.abs(want[i])) then
      error(("%s group %d: lr %.17g, PyTorch %.17g"):format(what, i, got[i], want[i]), 2)
    end
  end
end

local tests = {}

function tests.every_scheduler_case_matches_pytorch_lrs()
  local seen = {}
  for name, c in pairs(OF.optim().schedulers) do
    local opt = sgd(c.lrs)
    local sched = build(c, opt)
    for e, want in ipairs(c.epochs) do
      if e > 1 then opt:step(); sched:step() end
      close(sched:get_last_lr(), want, ("%s epoch %d"):format(name, e - 1))
      for i, g in ipairs(opt.param_groups) do check.eq(g.lr, sched:get_last_lr()[i], name .. " sets the group lr") end
    end
    seen[c.class] = true
  end
  for _, cls in ipairs {"StepLR", "MultiStepLR", "ExponentialLR", "LinearLR", "CosineAnnealingLR", "LambdaLR"} do assert(seen[cls], cls .. " has no fixture case") end
end

-- Three epochs, state_dict, a new scheduler on a new optimizer restored from both: the rest of
-- the sequence is PyTorch's.
function tests.state_dict_round_trip_resumes_the_sequence()
  for _, name in ipairs {"cosine", "multistep", "lambda_per_group"} do
    local c = OF.optim().schedulers[name]
    local opt = sgd(c.lrs)
    local sched = build(c, opt)
    for _ = 1, 3 do opt:step(); sched:step() end
    local osd, ssd = opt:state_dict(), sched:state_dict()
    local opt2 = sgd(c.lrs)
    opt2:load_state_dict(osd)
    local sched2 = build(c, opt2)
    sched2:load_state_dict(ssd)
    close(sched2:get_last_lr(), c.epochs[4], name .. " restored")
    for e = 5, #c.epochs do
      opt2:step(); sched2:step()
      close(sched2:get_last_lr(), c.epochs[e], ("%s resumed epoch %d"):format(name, e - 1))
    end
  end
end

function tests.positional_and_option_arguments_bind_alike()
  local a = optim.lr_scheduler.StepLR(sgd({0.1}), 2, {gamma = 0.5})
  local b = optim.lr_scheduler.StepLR(sgd({0.1}), {step_size = 2, gamma = 0.5})
  local m = optim.lr_scheduler.MultiStepLR(sgd({0.1}), {1, 2})
  for _ = 1, 2 do a:step(); b:step(); m:step() end
  close(a:get_last_lr(), {0.05}, "StepLR positional")
  close(b:get_last_lr(), {0.05}, "StepLR options")
  close(m:get_last_lr(), {0.001}, "MultiStepLR milestones positional")
end

function tests.bad_arguments_raise_value_errors()
  local L = optim.lr_scheduler
  local e = check.raises("ValueError", function() return L.StepLR(sgd({0.1})) end)
  assert(e.message:find("missing required argument 'step_size'"), e.message)
  e = check.raises("ValueError", function() return L.StepLR({}, 3) end)
  assert(e.message:find("must be an optimizer"), e.message)
  e = check.raises("ValueError", function() return L.LambdaLR(sgd({0.1, 0.2}), {function() return 1 end}) end)
  assert(e.message:find("expected 2 lr_lambdas"), e.message)
  e = check.raises("ValueError", function() return L.LinearLR(sgd({0.1}), {start_factor = 0}) end)
  assert(e.message:find("start_factor must be in %(0, 1%]"), e.message)
  e = check.raises("ValueError", function() return L.CosineAnnealingLR(sgd({0.1}), 5, {last_epoch = 3}) end)
  assert(e.message:find("no 'initial_lr'"), e.message)
end

return tests
