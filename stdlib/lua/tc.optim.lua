-- tc.optim: SGD, Adam and AdamW over parameter lists, following PyTorch's single-tensor
-- algorithms step for step (so results match torch.optim given the same gradients).
local tc = require "tc"
local raise = tc._C.raise
local optim = {}

local Optimizer = {}
Optimizer.__index = Optimizer

local function is_group(v) return type(v) == "table" and getmetatable(v) == nil and v.params ~= nil end

-- Checks and completes one parameter group: options from opts, the constructor's overrides, then
-- the class defaults; `validate(group)` raises for values out of range.
local function make_group(self, spec, opts)
  local cls = getmetatable(self)
  local group = {params = {}}
  for k, v in pairs(self.defaults) do group[k] = v end
  for _, src in ipairs {opts or {}, is_group(spec) and spec or {}} do
    for k, v in pairs(src) do
      if k ~= "params" then
        if self.defaults[k] == nil then raise("ValueError", string.format("%s: unknown option '%s'", cls.__name, k)) end
        group[k] = v
      end
    end
  end
  local list = is_group(spec) and spec.params or spec
  if tc.is_tensor(list) then list = {list} end
  for i, p in ipairs(list) do
    if not tc.is_tensor(p) then raise("ValueError", ("%s: parameter %d is a %s, not a tensor"):format(cls.__name, i, type(p))) end
    group.params[i] = p
  end
  if group.lr < 0 then raise("ValueError", string.format("%s: invalid learning rate: %g", cls.__name, group.lr)) end
  if cls.validate then cls.validate(group) end
  return group
end

-- params: an array of tensors, or an array of groups {params = {...}, lr = ...} whose options
-- override opts (PyTorch's per-parameter options).
local function new_optimizer(cls, params, defaults, opts)
  local self = setmetatable({param_groups = {}, state = {}, defaults = defaults}, cls)
  if type(params) ~= "table" then raise("ValueError", cls.__name .. ": params must be an array of tensors or of parameter groups") end
  if is_group(params[1]) then
    for _, spec in ipairs(params) do self:add_param_group(spec, opts) end
  else
    self.param_groups[1] = make_group(self, params, opts)
  end
  local n = 0
  for _, g in ipairs(self.param_groups) do n = n + #g.params end
  if n == 0 then raise("ValueError", cls.__name .. ": optimizer got an empty parameter list") end
  return self
end

function Optimizer:add_param_group(spec, opts)
  local group = make_group(self, spec, opts)
  local seen = {}
  for _, g in ipairs(self.param_groups) do for _, p in ipairs(g.params) do seen[p] = true end end
  for _, p in ipairs(group.params) do
    if seen[p] then raise("ValueError", "some parameters appear in more than one parameter group") end
  end
  self.param_groups[#self.param_groups + 1] = group
end

-- Sets every gradient to nil (PyTorch's default set_to_none=true).
function Optimizer:zero_grad()
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do p.grad = nil end
  end
end

-- state keyed by parameter position ("1", "2", ... across groups), tensors cloned.
function Optimizer:state_dict()
  local state, groups, idx = {}, {}, 0
  for gi, g in ipairs(self.param_groups) do
    local gcopy = {params = {}}
    for k, v in pairs(g) do if k ~= "params" then gcopy[k] = v end end
    for _, p in ipairs(g.params) do
      idx = idx + 1
      gcopy.params[#gcopy.params + 1] = idx
      local s = self.state[p]
      if s then
        local sc = {}
        for k, v in pairs(s) do sc[k] = tc.is_tensor(v) and v:clone() or v end
        state[idx] = sc
      end
    end
    groups[gi] = gcopy
  end
  return {state = state, param_groups = groups}
end

function Optimizer:load_state_dict(sd)
  local idx = 0
  for gi, g in ipairs(self.param_groups) do
    local src = sd.param_groups[gi]
    if not src or #src.params ~= #g.params then
      raise("ValueError", "loaded state dict has a different number of parameters")
    end
    for k, v in pairs(src) do if k ~= "params" then g[k] = v end end
    for _, p in ipairs(g.params) do
      idx = idx + 1
      local s = sd.state[idx]
      if s then
        local sc = {}
        for k, v in pairs(s) do sc[k] = tc.is_tensor(v) and v:clone() or v end
        self.state[p] = sc
      end
    end
  end
end

-- SGD with momentum, dampening, nesterov and weight decay ---------------------------------------
local SGD = {__name = "SGD"}
SGD.__index = SGD
optim.SGD = SGD
setmetatable(SGD, {__index = Optimizer, __call = function(cls, params, opts)
  return new_optimizer(cls, params, {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false}, opts)
end})
function SGD.validate(g)
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    raise("ValueError", "SGD: nesterov momentum requires a momentum and zero dampening")
  end
end

function SGD:step()
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      local d = p.grad
      if d ~= nil then
        if g.maximize then d = -d end
        if g.weight_decay ~= 0 then d = d:add(p:detach(), {alpha = g.weight_decay}) end
        if g.momentum ~= 0 then
          local s = self.state[p] or {}
          self.state[p] = s
          if s.momentum_buffer == nil then
            s.momentum_buffer = d:clone()
          else
            s.momentum_buffer:mul_(g.momentum):add_(d, {alpha = 1 - g.dampening})
          end
          d = g.nesterov and d:add(s.momentum_buffer, {alpha = g.momentum}) or s.momentum_buffer
        end
        p:detach():add_(d, {alpha = -g.lr})
      end
    end
  end
end

-- Adam and AdamW ---------------------------------------------------------------------------------
local function adam_class(name, decoupled)
  local A = {__name = name}
  A.__index = A
  setmetatable(A, {__index = Optimizer, __call = function(cls, params, opts)
    return new_optimizer(cls, params, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8,
      weight_decay = decoupled and 1e-2 or 0, amsgrad = false, maximize = false}, opts)
  end})
  function A.validate(g)
    local b = g.betas
    if b[1] < 0 or b[1] >= 1 or b[2] < 0 or b[2] >= 1 then
      raise("ValueError", string.format("%s: invalid betas {%g, %g}", name, b[1], b[2]))
    end
  end
  function A:step()
    for _, g in ipairs(self.param_groups) do
      local beta1, beta2 = g.betas[1], g.betas[2]
      for _, p in ipairs(g.params) do
        local grad = p.grad
        if grad ~= nil then
          if g.maximize then grad = -grad end
          local s = self.state[p]
          if s == nil then
            s = {step = 0, exp_avg = tc.zeros_like(p), exp_avg_sq = tc.zeros_like(p)}
            if g.amsgrad then s.max_exp_avg_sq = tc.zeros_like(p) end
            self.state[p] = s
          end
          s.step = s.step + 1
          local param = p:detach()
          if g.weight_decay ~= 0 then
            if decoupled then
              param:mul_(1 - g.lr * g.weight_decay)
            else
              grad = grad:add(param, {alpha = g.weight_decay})
            end
          end
          s.exp_avg:mul_(beta1):add_(grad, {alpha = 1 - beta1})
          s.exp_avg_sq:mul_(beta2):add_(grad * grad, {alpha = 1 - beta2})
          local bc1 = 1 - beta1 ^ s.step
          local bc2 = 1 - beta2 ^ s.step
          local step_size = g.lr / bc1
          local v = s.exp_avg_sq
          if g.amsgrad then
            s.max_exp_avg_sq:copy_(tc.maximum(s.max_exp_avg_sq, s.exp_avg_sq))
            v = s.max_exp_avg_sq
          end
          local denom = v:sqrt() / math.sqrt(bc2) + g.eps
          param:add_(s.exp_avg / denom, {alpha = -step_size})
        end
      end
    end
  end
  return A
end
optim.Adam = adam_class("Adam", false)
optim.AdamW = adam_class("AdamW", true)

return optim
