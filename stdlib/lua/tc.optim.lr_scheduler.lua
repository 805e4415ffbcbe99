-- tc.optim.lr_scheduler: learning-rate schedulers as PyTorch's (1.13 formulas, chainable forms):
-- StepLR, MultiStepLR, ExponentialLR, LinearLR, CosineAnnealingLR, LambdaLR. Construction sets every group's lr for epoch
-- 0; `sched:step()` (after `opt:step()`) moves to the next epoch; `sched:get_last_lr()` gives the
-- groups' current lrs; state_dict()/load_state_dict() save and restore the position.
-- Arguments bind like PyTorch's: StepLR(opt, 30, {gamma = 0.1}) or StepLR(opt, {step_size = 30}).
local tc = require "tc"
local args = tc._C.args
local K, raise = args.kinds, tc._C.raise
local lr_scheduler = {}

local OPTIMIZER = {what = "an optimizer (tc.optim)", ok = function(v)
  return type(v) == "table" and type(v.param_groups) == "table"
end}
local MILESTONES = {what = "an array of integers", ok = function(v)
  if type(v) ~= "table" then return false end
  for _, m in ipairs(v) do if math.type(m) ~= "integer" then return false end end
  return true
end}
local LAMBDAS = {what = "a function or an array of functions (one per parameter group)", ok = function(v)
  if type(v) == "function" then return true end
  if type(v) ~= "table" or #v == 0 then return false end
  for _, f in ipairs(v) do if type(f) ~= "function" then return false end end
  return true
end, array = true}

local LRScheduler = {}
LRScheduler.__index = LRScheduler
lr_scheduler.LRScheduler = LRScheduler

-- A scheduler class from its signature rows (after `optimizer`) and get_lr(self) -> array of lrs.
local function scheduler_class(name, rows, init)
  local cls = setmetatable({__name = name}, {__index = LRScheduler})
  cls.__index = cls
  table.insert(rows, 1, {"optimizer", OPTIMIZER})
  rows[#rows + 1] = {"last_epoch", K.int, -1}
  local sig = args.signature("lr_scheduler." .. name, rows)
  setmetatable(cls, {__index = LRScheduler, __call = function(c, ...)
    local a = sig:bind(...)
    local self = setmetatable({optimizer = a.optimizer, last_epoch = a.last_epoch}, c)
    local groups = a.optimizer.param_groups
    for i, g in ipairs(groups) do
      if a.last_epoch == -1 then
        g.initial_lr = g.lr
      elseif g.initial_lr == nil then
        raise("ValueError", ("lr_scheduler.%s(): param_groups[%d] has no 'initial_lr' to resume from (last_epoch = %d)")
          :format(name, i, a.last_epoch))
      end
    end
    self.base_lrs = {}
    for i, g in ipairs(groups) do self.base_lrs[i] = g.initial_lr end
    init(self, a)
    self._step_count = 0
    self:step()
    return self
  end})
  lr_scheduler[name] = cls
  return cls
end

function LRScheduler:step()
  self._step_count = self._step_count + 1
  self.last_epoch = self.last_epoch + 1
  local lrs = self:get_lr()
  self._last_lr = {}
  for i, g in ipairs(self.optimizer.param_groups) do
    g.lr = lrs[i]
    self._last_lr[i] = lrs[i]
  end
end

function LRScheduler:get_last_lr() return table.move(self._last_lr, 1, #self._last_lr, 1, {}) end

local function copy(v)
  if type(v) ~= "table" then return v end
  local c = {}
  for k, e in pairs(v) do c[k] = copy(e) end
  return c
end

-- Everything but the optimizer (and LambdaLR's functions).
function LRScheduler:state_dict()
  local sd = {}
  for k, v in pairs(self) do
    if k ~= "optimizer" and type(v) ~= "function" and k ~= "lr_lambdas" then sd[k] = copy(v) end
  end
  return sd
end

function LRScheduler:load_state_dict(sd)
  for k, v in pairs(sd) do self[k] = copy(v) end
end

-- The groups' current lrs, each times f(i, lr).
local function each_lr(self, f)
  local out = {}
  for i, g in ipairs(self.optimizer.param_groups) do out[i] = f(i, g.lr) end
  return out
end

-- StepLR(optimizer, step_size, gamma=0.1): lr times gamma every step_size epochs.
local StepLR = scheduler_class("StepLR", {{"step_size", K.count}, {"gamma", K.number, 0.1}}, function(self, a)
  self.step_size, self.gamma = a.step_size, a.gamma
end)
function StepLR:get_lr()
  local e = self.last_epoch
  if e == 0 or e % self.step_size ~= 0 then return each_lr(self, function(_, lr) return lr end) end
  return each_lr(self, function(_, lr) return lr * self.gamma end)
end

-- MultiStepLR(optimizer, milestones, gamma=0.1): lr times gamma at each milestone epoch (a
-- milestone listed twice multiplies by gamma^2).
local MultiStepLR = scheduler_class("MultiStepLR", {{"milestones", MILESTONES}, {"gamma", K.number, 0.1}}, function(self, a)
  self.milestones, self.gamma = {}, a.gamma
  for _, m in ipairs(a.milestones) do self.milestones[m] = (self.milestones[m] or 0) + 1 end
end)
function MultiStepLR:get_lr()
  local times = self.milestones[self.last_epoch] or 0
  return each_lr(self, function(_, lr) return lr * self.gamma ^ times end)
end

-- ExponentialLR(optimizer, gamma): lr times gamma every epoch.
local ExponentialLR = scheduler_class("ExponentialLR", {{"gamma", K.number}}, function(self, a) self.gamma = a.gamma end)
function ExponentialLR:get_lr()
  local f = self.last_epoch == 0 and 1 or self.gamma
  return each_lr(self, function(_, lr) return lr * f end)
end

-- LinearLR(optimizer, start_factor=1/3, end_factor=1, total_iters=5): the lr factor goes linearly
-- from start_factor to end_factor over total_iters epochs (a warm-up), then stays.
local LinearLR = scheduler_class("LinearLR", {{"start_factor", K.number, 1 / 3}, {"end_factor", K.number, 1.0},
  {"total_iters", K.natural, 5}}, function(self, a)
  if a.start_factor <= 0 or a.start_factor > 1 then
    raise("ValueError", ("lr_scheduler.LinearLR(): start_factor must be in (0, 1], got %g"):format(a.start_factor))
  end
  if a.end_factor < 0 or a.end_factor > 1 then
    raise("ValueError", ("lr_scheduler.LinearLR(): end_factor must be in [0, 1], got %g"):format(a.end_factor))
  end
  self.start_factor, self.end_factor, self.total_iters = a.start_factor, a.end_factor, a.total_iters
end)
function LinearLR:get_lr()
  local e, s, d = self.last_epoch, self.start_factor, self.end_factor - self.start_factor
  if e == 0 then return each_lr(self, function(_, lr) return lr * s end) end
  if e > self.total_iters then return each_lr(self, function(_, lr) return lr end) end
  return each_lr(self, function(_, lr) return lr * (1 + d / (self.total_iters * s + (e - 1) * d)) end)
end

-- CosineAnnealingLR(optimizer, T_max, eta_min=0): cosine from the base lr down to eta_min over
-- T_max epochs (PyTorch's recursive form, so lrs changed from outside carry on).
local CosineAnnealingLR = scheduler_class("CosineAnnealingLR", {{"T_max", K.count}, {"eta_min", K.number, 0}}, function(self, a)
  self.T_max, self.eta_min = a.T_max, a.eta_min
end)
function CosineAnnealingLR:get_lr()
  local e, T, eta = self.last_epoch, self.T_max, self.eta_min
  local pi, cos = math.pi, math.cos
  if e == 0 then return each_lr(self, function(_, lr) return lr end) end
  if self._step_count == 1 and e > 0 then
    return each_lr(self, function(i) return eta + (self.base_lrs[i] - eta) * (1 + cos(e * pi / T)) / 2 end)
  end
  if (e - 1 - T) % (2 * T) == 0 then
    return each_lr(self, function(i, lr) return lr + (self.base_lrs[i] - eta) * (1 - cos(pi / T)) / 2 end)
  end
  return each_lr(self, function(_, lr)
    return (1 + cos(pi * e / T)) / (1 + cos(pi * (e - 1) / T)) * (lr - eta) + eta
  end)
end

-- LambdaLR(optimizer, lr_lambda): lr = base lr * lr_lambda(epoch); one function or one per group.
local LambdaLR = scheduler_class("LambdaLR", {{"lr_lambda", LAMBDAS}}, function(self, a)
  local n = #self.optimizer.param_groups
  if type(a.lr_lambda) == "function" then
    self.lr_lambdas = {}
    for i = 1, n do self.lr_lambdas[i] = a.lr_lambda end
  else
    if #a.lr_lambda ~= n then
      raise("ValueError", ("lr_scheduler.LambdaLR(): expected %d lr_lambdas (one per parameter group), got %d"):format(n, #a.lr_lambda))
    end
    self.lr_lambdas = a.lr_lambda
  end
end)
function LambdaLR:get_lr()
  return each_lr(self, function(i) return self.base_lrs[i] * self.lr_lambdas[i](self.last_epoch) end)
end

return lr_scheduler
