-- tc.optim: SGD, Adam, AdamW, RMSprop and Adagrad over parameter groups, following PyTorch's
-- single-tensor algorithms step for step (so results match torch.optim given the same gradients);
-- learning-rate schedulers in tc.optim.lr_scheduler.
--
-- State layout: an optimizer's per-parameter state tensors (exp_avg, momentum_buffer ...) are views
-- into flat buffers, one per "bucket" (the parameters of a group of one device and dtype that got
-- their first gradient at the same step). A step updates each bucket in one of three ways:
-- - fused (option fused=true; the default for floating-point parameters on every device): one op per bucket (per step count)
--   over the lists of parameters, gradients and state views (tc._fused_adam_ ..., ops.def): on
--   CUDA a few multi-tensor kernel launches for all of them (64 parameters per launch), on the CPU
--   one pass shared by the threads. Parameters without a gradient are left out of the lists.
-- - foreach (foreach=true): when every parameter of the bucket has a gradient and the same step
--   count, the gradients and parameters are concatenated, each op of the algorithm runs once on
--   the flat buffers and the new values are copied back (about ten launches per bucket, two cats,
--   one copy per parameter).
-- - per parameter (foreach=false, fused=false): every op of the algorithm once per parameter, on
--   the same state views. PyTorch's CPU default; ours is fused, which gives the same values
--   (tests/lua/test_optim_steps.lua) 1.5-7x faster (bench/optim_step.lua cpu).
-- All three run the same arithmetic (cls.update; the fused kernels follow it element by element,
-- stdlib/cpu/optim.h). fused=true and foreach=true together are an error, as in PyTorch.
-- Under tc.compile, step and zero_grad trace into graphs (docs/architecture.md "Compiled training");
-- every group's lr is marked (tc.compiler.mark_dynamic(group, "lr")): the fused op takes it as a
-- graph input, so a scheduler or the user changing it does not recompile the step.
local tc = require "tc"
local raise = tc._C.raise
local zero_grad = require("tc.nn.utils").zero_grad
local optim = {}

local Optimizer = {}
Optimizer.__index = Optimizer
optim.Optimizer = Optimizer

local function is_group(v) return type(v) == "table" and getmetatable(v) == nil and v.params ~= nil end

-- Options every optimizer accepts besides its defaults (nil by default; initial_lr is set by the
-- lr schedulers).
local COMMON = {foreach = true, fused = true, initial_lr = true}

-- Checks and completes one parameter group: options from opts, the constructor's overrides, then
-- the class defaults; `validate(group)` raises for values out of range.
local function make_group(self, spec, opts)
  local cls = getmetatable(self)
  local group = {params = {}}
  for k, v in pairs(self.defaults) do group[k] = v end
  for _, src in ipairs {opts or {}, is_group(spec) and spec or {}} do
    for k, v in pairs(src) do
      if k ~= "params" then
        if self.defaults[k] == nil and not COMMON[k] then
          raise("ValueError", string.format("%s: unknown option '%s'", cls.__name, k))
        end
        group[k] = v
      end
    end
  end
  local list = is_group(spec) and spec.params or spec
  if tc.is_tensor(list) then list = {list} end
  local seen = {}
  for i, p in ipairs(list) do
    if not tc.is_tensor(p) then raise("ValueError", ("%s: parameter %d is a %s, not a tensor"):format(cls.__name, i, type(p))) end
    if seen[p] then raise("ValueError", ("%s: parameter %d appears twice in one parameter group"):format(cls.__name, i)) end
    seen[p] = true
    group.params[i] = p
  end
  if group.foreach ~= nil and type(group.foreach) ~= "boolean" then
    raise("ValueError", ("%s: foreach must be true, false or nil (nil: fused for floating-point parameters), got %s"):format(cls.__name, tostring(group.foreach)))
  end
  if group.fused ~= nil and type(group.fused) ~= "boolean" then
    raise("ValueError", ("%s: fused must be true, false or nil (nil: true for floating-point parameters), got %s"):format(cls.__name, tostring(group.fused)))
  end
  if group.fused and group.foreach then
    raise("ValueError", cls.__name .. ": fused=true and foreach=true cannot be used together")
  end
  if type(group.lr) ~= "number" or group.lr < 0 then
    raise("ValueError", string.format("%s: invalid learning rate: %s", cls.__name, tostring(group.lr)))
  end
  if group.weight_decay ~= nil and group.weight_decay < 0 then
    raise("ValueError", string.format("%s: invalid weight_decay value: %g", cls.__name, group.weight_decay))
  end
  if group.eps ~= nil and group.eps < 0 then
    raise("ValueError", string.format("%s: invalid epsilon value: %g", cls.__name, group.eps))
  end
  if cls.validate then cls.validate(group) end
  -- under tc.compile the fused step takes lr as a graph input, not as a constant: a scheduler
  -- (or the user) changing it does not recompile the step (nor re-record its CUDA graph)
  tc.compiler.mark_dynamic(group, "lr")
  return group
end

-- params: an array of tensors, or an array of groups {params = {...}, lr = ...} whose options
-- override opts (PyTorch's per-parameter options).
local function new_optimizer(cls, params, defaults, opts)
  local self = setmetatable({param_groups = {}, state = {}, defaults = defaults, _slot = {}}, cls)
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

-- An optimizer class with its default options: cls.slots(group) -> array of {name, fill} (the state tensors
-- shaped like the parameter, created filled with `fill`), cls.update(group, param, grad, S, step)
-- (one step in place on param and the tensors of S; step counts from 1), cls.validate(group).
local function optimizer_class(name, defaults)
  local cls = {__name = name}
  cls.__index = cls
  cls.__tostring = Optimizer.__tostring
  setmetatable(cls, {__index = Optimizer, __call = function(c, params, opts)
    local d = {}
    for k, v in pairs(defaults) do d[k] = type(v) == "table" and table.move(v, 1, #v, 1, {}) or v end
    return new_optimizer(c, params, d, opts)
  end})
  optim[name] = cls
  return cls
end

-- print(opt): the class and each group's options, as PyTorch prints an optimizer.
function Optimizer:__tostring()
  local lines = {getmetatable(self).__name .. " ("}
  for gi, g in ipairs(self.param_groups) do
    lines[#lines + 1] = "Parameter Group " .. gi
    local keys = {}
    for k in pairs(g) do if k ~= "params" then keys[#keys + 1] = k end end
    table.sort(keys)
    for _, k in ipairs(keys) do
      local v = g[k]
      if type(v) == "table" then
        local parts = {}
        for i, e in ipairs(v) do parts[i] = tostring(e) end
        v = "{" .. table.concat(parts, ", ") .. "}"
      end
      lines[#lines + 1] = ("    %s: %s"):format(k, tostring(v))
    end
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
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

-- ---- state buckets ------------------------------------------------------------------------------
-- Gives bucket b the flat buffers of the slots group g needs that it lacks (all of them when new;
-- one more when an option such as momentum is switched on later), and its parameters' states the
-- views into them.
local function add_slots(self, g, b)
  local first = b.params[1]
  for _, slot in ipairs(getmetatable(self).slots(g)) do
    local name = slot[1]
    if b.buffers[name] == nil then
      local flat = tc.full({b.numel}, slot[2], {dtype = first.dtype, device = first.device})
      b.buffers[name] = flat
      local off = 1
      for _, p in ipairs(b.params) do
        self.state[p][name] = flat:narrow(1, off, p:numel()):view(p.shape)
        off = off + p:numel()
      end
    end
  end
end

-- Step counts. While every parameter of a bucket has taken every step (b.together), their count
-- is the bucket's: b.step, a 0-dim float64 tensor the fused step increments in place, so a compiled step
-- reads no Lua number that changes on every call (it would recompile); state[p].step reads it.
-- When a step leaves some parameters out, each gets its own count (a number in state[p]).
local function new_state(b)
  return setmetatable({}, {__index = function(_, k)
    if k == "step" and b.together then return b.step:item() end
  end})
end

local function separate(self, b)
  if not b.together then return end
  local n = b.step:item()
  for _, p in ipairs(b.params) do rawset(self.state[p], "step", n) end
  b.together = false
end

-- Gives every parameter of `ps` (all of group g) that has no bucket yet its state: views into new
-- flat buffers shared by the parameters of one device and dtype, filled from prior[p] (a state
-- table: loaded, or the parameter's state before it was re-bucketed) where given.
local function allocate(self, g, ps, prior)
  local by_kind, kinds = {}, {}
  for _, p in ipairs(ps) do
    if self._slot[p] == nil then
      local key = p.device .. "|" .. p.dtype.name
      if not by_kind[key] then by_kind[key] = {}; kinds[#kinds + 1] = key end
      table.insert(by_kind[key], p)
    end
  end
  for _, key in ipairs(kinds) do
    local members, total = by_kind[key], 0
    for _, p in ipairs(members) do total = total + p:numel() end
    -- the step count on the parameters' device: on CUDA the fused kernels read it there, so the
    -- step's graph is on one GPU (reduce-overhead records it into a CUDA graph)
    local step = tc.zeros({}, {dtype = tc.float64, device = members[1].device})
    local b = {params = members, buffers = {}, numel = total, step = step, together = true}
    for _, p in ipairs(members) do
      self._slot[p] = {bucket = b}
      self.state[p] = new_state(b)
    end
    add_slots(self, g, b)
    local steps = {}
    for i, p in ipairs(members) do
      local s, pr = self.state[p], prior and prior[p] or {}
      for k, v in pairs(pr) do
        if tc.is_tensor(s[k]) then s[k]:copy_(v) elseif not tc.is_tensor(v) and k ~= "step" then s[k] = v end
      end
      steps[i] = pr.step or 0
    end
    for i = 2, #steps do b.together = b.together and steps[i] == steps[1] end
    if b.together then
      b.step:fill_(steps[1])
      b.stepped = steps[1] > 0
    else
      for i, p in ipairs(members) do rawset(self.state[p], "step", steps[i]) end
    end
  end
end

-- Parameters that m:to()/cuda()/half() replaced (tc.nn._replacement) take the old ones' place in
-- the groups, with their state converted; the group's buckets are rebuilt at this step.
local function follow_replacements(self)
  local nn = package.loaded["tc.nn"]
  if nn == nil then return end
  for _, g in ipairs(self.param_groups) do
    local origin = {}
    for i, p in ipairs(g.params) do
      local r = nn._replacement(p)
      if r ~= nil then origin[r], g.params[i] = p, r end
    end
    if next(origin) ~= nil then
      local prior, with_state = {}, {}
      for _, p in ipairs(g.params) do
        local old = origin[p] or p
        if self.state[old] ~= nil then prior[p], with_state[#with_state + 1] = self.state[old], p end
        self.state[old], self._slot[old] = nil, nil
      end
      allocate(self, g, with_state, prior)
    end
  end
end

local function on_cuda(p) return p.device:sub(1, 4) == "cuda" end

-- The steps below read per-parameter step counts (Lua numbers that change on every step): under
-- tc.compile each is a graph break that runs uncompiled (traced, it would recompile every step).
-- Only the fused step of a bucket that steps together (fused_step) traces.

-- One step of the whole bucket on its flat buffers, when every parameter has a gradient and all
-- have taken the same number of steps.
local try_foreach = tc.compiler.disable(function(self, g, b)
  separate(self, b)
  local ps = b.params
  local step = self.state[ps[1]].step
  local grads, params = {}, {}
  for i, p in ipairs(ps) do
    local grad = p.grad
    if grad == nil or self.state[p].step ~= step then return false end
    grads[i], params[i] = grad:reshape(-1), p:detach():reshape(-1)
  end
  local flat_grad, flat_param = tc.cat(grads), tc.cat(params)
  step = step + 1
  getmetatable(self).update(g, flat_param, flat_grad, b.buffers, step)
  local off = 1
  for _, p in ipairs(ps) do
    local n = p:numel()
    p:detach():copy_(flat_param:narrow(1, off, n):view(p.shape))
    self.state[p].step = step
    off = off + n
  end
  return true
end)

-- The fused op once per distinct step count of the bucket's parameters that have a gradient.
local fused_by_count = tc.compiler.disable(function(self, g, b)
  separate(self, b)
  local cls = getmetatable(self)
  local slots = cls.slots(g)
  local calls, order = {}, {}
  for _, p in ipairs(b.params) do
    local grad = p.grad
    if grad ~= nil then
      local s = self.state[p]
      local c = calls[s.step]
      if c == nil then
        c = {params = {}, grads = {}, states = {}}
        for _, slot in ipairs(slots) do c.states[slot[1]] = {} end
        calls[s.step], order[#order + 1] = c, s.step
      end
      local i = #c.params + 1
      c.params[i], c.grads[i] = p, grad
      for _, slot in ipairs(slots) do c.states[slot[1]][i] = s[slot[1]] end
    end
  end
  for _, step in ipairs(order) do
    local c = calls[step]
    cls.fused(g, c.params, c.grads, c.states, step + 1, step == 0)
    for _, p in ipairs(c.params) do self.state[p].step = step + 1 end
  end
  return true
end)

-- One parameter's step, op by op (cls.update).
local step_one = tc.compiler.disable(function(self, g, b, p)
  separate(self, b)
  local s = self.state[p]
  s.step = s.step + 1
  getmetatable(self).update(g, p:detach(), p.grad, s, s.step)
end)

-- One step of the bucket's parameters that have a gradient through the class's fused op: one
-- call while they step together (b.step, incremented in place), else one call per distinct step
-- count.
local function fused_step(self, g, b)
  local cls = getmetatable(self)
  local slots = cls.slots(g)
  if b.together then
    local params, grads, n = {}, {}, 0  -- lists made here: a traced op takes those
    for i, p in ipairs(b.params) do
      local grad = p.grad
      params[i] = p
      if grad ~= nil then n = n + 1; grads[n] = grad end
    end
    if n == #params then
      local states = {}
      for _, slot in ipairs(slots) do
        local list = {}
        for i, p in ipairs(b.params) do list[i] = self.state[p][slot[1]] end
        states[slot[1]] = list
      end
      b.step:add_(1)
      cls.fused(g, params, grads, states, b.step, not b.stepped)
      b.stepped = true
      return true
    end
  end
  return fused_by_count(self, g, b)
end

-- fused (nil: when the parameters are floating-point tensors and foreach is not asked for)
local function use_fused(g, p)
  if g.fused ~= nil then return g.fused end
  return g.foreach == nil and p.dtype.is_floating_point
end

-- g's parameters that have a gradient, their state allocated (those new to it get theirs).
local function allocate_with_grad(self, g)
  local with_grad = {}
  for _, p in ipairs(g.params) do if p.grad ~= nil then with_grad[#with_grad + 1] = p end end
  allocate(self, g, with_grad)
  return with_grad
end

local function step_groups(self)
  follow_replacements(self)
  for _, g in ipairs(self.param_groups) do
    local with_grad = allocate_with_grad(self, g)
    local done = {}
    for _, p in ipairs(with_grad) do
      local b = self._slot[p].bucket
      if done[b] == nil then
        add_slots(self, g, b)
        if use_fused(g, p) then
          done[b] = fused_step(self, g, b)
        else
          local foreach = g.foreach
          if foreach == nil then foreach = on_cuda(p) end
          done[b] = foreach and try_foreach(self, g, b)
        end
      end
      if not done[b] then step_one(self, g, b, p) end
    end
  end
end

-- Whether a parameter with a gradient has no state yet (read in the trace: guarded).
local function lacks_state(self)
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      if p.grad ~= nil and self._slot[p] == nil then return true end
    end
  end
  return false
end

-- The state of the parameters that got their first gradient.
local function make_state(self)
  follow_replacements(self)
  for _, g in ipairs(self.param_groups) do allocate_with_grad(self, g) end
end

-- A step that makes state runs uncompiled (as torch runs _init_group eagerly): its update would be
-- a graph compiled for this one call.
local step_making_state = tc.compiler.disable(function(self)
  make_state(self)
  tc.no_grad(step_groups, self)
end)

-- Under tc.compile the step traces into a graph: p.grad are guarded inputs, the fused op writes
-- parameters and state in place, b.step counts in the graph. A step that makes state runs
-- uncompiled at a break here, in step's own frame: that entry guards that some parameter lacks
-- state, so the next step misses it and traces the update into a graph (a break inside the
-- update's nested calls would be kept by every later call: the steps would stay uncompiled). The foreach
-- and per-parameter paths and a fused bucket whose parameters no longer step together break
-- inside (they run uncompiled).
function Optimizer:step(closure)
  local loss
  if closure ~= nil then loss = tc.enable_grad(closure) end
  if lacks_state(self) then
    step_making_state(self)
  else
    tc.no_grad(step_groups, self)
  end
  return loss
end

-- zero_grad({set_to_none = true}): gradients become nil (PyTorch 2's default); with
-- set_to_none = false they are zeroed in place.
function Optimizer:zero_grad(opts)
  follow_replacements(self)
  for _, g in ipairs(self.param_groups) do zero_grad(g.params, opts) end
end

-- zero_grad traces into the graph too (p.grad = nil is a recorded effect).

-- ---- state_dict ---------------------------------------------------------------------------------
-- state keyed by parameter position (1, 2, ... across groups), tensors cloned.
function Optimizer:state_dict()
  follow_replacements(self)
  local state, groups, idx = {}, {}, 0
  for gi, g in ipairs(self.param_groups) do
    local gcopy = {params = {}}
    for k, v in pairs(g) do
      if k ~= "params" then gcopy[k] = type(v) == "table" and table.move(v, 1, #v, 1, {}) or v end
    end
    for _, p in ipairs(g.params) do
      idx = idx + 1
      gcopy.params[#gcopy.params + 1] = idx
      local s = self.state[p]
      if s then
        local sc = {step = s.step}
        for k, v in pairs(s) do sc[k] = tc.is_tensor(v) and v:clone() or v end
        state[idx] = sc
      end
    end
    groups[gi] = gcopy
  end
  return {state = state, param_groups = groups}
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- Restores hyper-parameters and state saved by state_dict() of an optimizer of the same class
-- over parameters of the same shapes; a mismatch is a ValueError naming the parameter.
function Optimizer:load_state_dict(sd)
  follow_replacements(self)
  local cls = getmetatable(self)
  if type(sd) ~= "table" or type(sd.param_groups) ~= "table" or type(sd.state) ~= "table" then
    raise("ValueError", cls.__name .. ".load_state_dict: expected a table {state = ..., param_groups = ...}")
  end
  if #sd.param_groups ~= #self.param_groups then
    raise("ValueError", ("%s.load_state_dict: the state dict has %d parameter groups, the optimizer %d")
      :format(cls.__name, #sd.param_groups, #self.param_groups))
  end
  for gi, g in ipairs(self.param_groups) do
    if #sd.param_groups[gi].params ~= #g.params then
      raise("ValueError", ("%s.load_state_dict: group %d of the state dict has %d parameters, the optimizer's %d")
        :format(cls.__name, gi, #sd.param_groups[gi].params, #g.params))
    end
  end
  -- check everything before changing anything
  local idx, loaded = 0, {}
  for gi, g in ipairs(self.param_groups) do
    local slots = cls.slots(setmetatable({}, {__index = function(_, k)
      local v = sd.param_groups[gi][k]
      if v == nil then v = g[k] end
      return v
    end}))
    for _, p in ipairs(g.params) do
      idx = idx + 1
      local s = sd.state[idx]
      if s ~= nil then
        for _, slot in ipairs(slots) do
          local t = s[slot[1]]
          if not tc.is_tensor(t) then
            raise("ValueError", ("%s.load_state_dict: state of parameter %d has no tensor '%s'"):format(cls.__name, idx, slot[1]))
          end
          if not same_shape(t.shape, p.shape) then
            raise("ValueError", ("%s.load_state_dict: state '%s' of parameter %d has shape %s, the parameter has shape %s")
              :format(cls.__name, slot[1], idx, tostring(t.shape), tostring(p.shape)))
          end
        end
        if type(s.step) ~= "number" then
          raise("ValueError", ("%s.load_state_dict: state of parameter %d has no step count"):format(cls.__name, idx))
        end
        loaded[p] = s
      end
    end
  end
  local _ <close> = tc.no_grad()
  for gi, g in ipairs(self.param_groups) do
    for k, v in pairs(sd.param_groups[gi]) do
      if k ~= "params" then g[k] = type(v) == "table" and table.move(v, 1, #v, 1, {}) or v end
    end
    -- parameters without saved state start afresh; the others get fresh buckets filled below
    for _, p in ipairs(g.params) do self._slot[p], self.state[p] = nil, nil end
    local with_state = {}
    for _, p in ipairs(g.params) do if loaded[p] then with_state[#with_state + 1] = p end end
    allocate(self, g, with_state, loaded)
  end
end

-- ---- SGD with momentum, dampening, nesterov and weight decay -------------------------------------
local SGD = optimizer_class("SGD", {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false, maximize = false})
function SGD.validate(g)
  if g.momentum < 0 then raise("ValueError", ("SGD: invalid momentum value: %g"):format(g.momentum)) end
  if g.nesterov and (g.momentum <= 0 or g.dampening ~= 0) then
    raise("ValueError", "SGD: nesterov momentum requires a momentum and zero dampening")
  end
end
function SGD.slots(g) return g.momentum ~= 0 and {{"momentum_buffer", 0}} or {} end
function SGD.update(g, param, d, S, step)
  if g.maximize then d = -d end
  if g.weight_decay ~= 0 then d = d:add(param, {alpha = g.weight_decay}) end
  if g.momentum ~= 0 then
    local buf = S.momentum_buffer
    if step == 1 then
      buf:copy_(d)
    else
      buf:mul_(g.momentum):add_(d, {alpha = 1 - g.dampening})
    end
    d = g.nesterov and d:add(buf, {alpha = g.momentum}) or buf
  end
  param:add_(d, {alpha = -g.lr})
end

function SGD.fused(g, params, grads, S, step, first)
  tc._fused_sgd_(params, grads, S.momentum_buffer or {}, {lr = g.lr, momentum = g.momentum, dampening = g.dampening,
    weight_decay = g.weight_decay, nesterov = g.nesterov, maximize = g.maximize, first_step = first})
end

-- ---- Adam and AdamW -----------------------------------------------------------------------------
local function adam_class(name, decoupled)
  local A = optimizer_class(name, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8,
    weight_decay = decoupled and 1e-2 or 0, amsgrad = false, maximize = false})
  function A.validate(g)
    local b = g.betas
    if b[1] < 0 or b[1] >= 1 or b[2] < 0 or b[2] >= 1 then
      raise("ValueError", string.format("%s: invalid betas {%g, %g}", name, b[1], b[2]))
    end
  end
  function A.slots(g)
    local s = {{"exp_avg", 0}, {"exp_avg_sq", 0}}
    if g.amsgrad then s[3] = {"max_exp_avg_sq", 0} end
    return s
  end
  function A.update(g, param, grad, S, step)
    local beta1, beta2 = g.betas[1], g.betas[2]
    if g.maximize then grad = -grad end
    if g.weight_decay ~= 0 then
      if decoupled then
        param:mul_(1 - g.lr * g.weight_decay)
      else
        grad = grad:add(param, {alpha = g.weight_decay})
      end
    end
    S.exp_avg:mul_(beta1):add_(grad, {alpha = 1 - beta1})
    S.exp_avg_sq:mul_(beta2):add_(grad * grad, {alpha = 1 - beta2})
    local step_size = g.lr / (1 - beta1 ^ step)
    local v = S.exp_avg_sq
    if g.amsgrad then
      S.max_exp_avg_sq:copy_(tc.maximum(S.max_exp_avg_sq, S.exp_avg_sq))
      v = S.max_exp_avg_sq
    end
    local denom = (v:sqrt() / math.sqrt(1 - beta2 ^ step)):add_(g.eps)
    param:add_(S.exp_avg / denom, {alpha = -step_size})
  end
  local fused_op = decoupled and tc._fused_adamw_ or tc._fused_adam_
  function A.fused(g, params, grads, S, step)
    fused_op(params, grads, S.exp_avg, S.exp_avg_sq, S.max_exp_avg_sq or {}, step, {lr = g.lr, beta1 = g.betas[1],
      beta2 = g.betas[2], eps = g.eps, weight_decay = g.weight_decay, amsgrad = g.amsgrad, maximize = g.maximize})
  end
end
adam_class("Adam", false)
adam_class("AdamW", true)

-- ---- RMSprop ------------------------------------------------------------------------------------
local RMSprop = optimizer_class("RMSprop", {lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0,
  centered = false, maximize = false})
function RMSprop.validate(g)
  if g.momentum < 0 then raise("ValueError", ("RMSprop: invalid momentum value: %g"):format(g.momentum)) end
  if g.alpha < 0 then raise("ValueError", ("RMSprop: invalid alpha value: %g"):format(g.alpha)) end
end
function RMSprop.slots(g)
  local s = {{"square_avg", 0}}
  if g.momentum > 0 then s[#s + 1] = {"momentum_buffer", 0} end
  if g.centered then s[#s + 1] = {"grad_avg", 0} end
  return s
end
function RMSprop.update(g, param, grad, S)
  if g.maximize then grad = -grad end
  if g.weight_decay ~= 0 then grad = grad:add(param, {alpha = g.weight_decay}) end
  local alpha = g.alpha
  S.square_avg:mul_(alpha):add_(grad * grad, {alpha = 1 - alpha})
  local avg
  if g.centered then
    S.grad_avg:mul_(alpha):add_(grad, {alpha = 1 - alpha})
    avg = S.square_avg:sub(S.grad_avg * S.grad_avg):sqrt_()
  else
    avg = S.square_avg:sqrt()
  end
  avg:add_(g.eps)
  if g.momentum > 0 then
    S.momentum_buffer:mul_(g.momentum):add_(grad / avg)
    param:add_(S.momentum_buffer, {alpha = -g.lr})
  else
    param:add_(grad / avg, {alpha = -g.lr})
  end
end

function RMSprop.fused(g, params, grads, S)
  tc._fused_rmsprop_(params, grads, S.square_avg, S.momentum_buffer or {}, S.grad_avg or {}, {lr = g.lr, alpha = g.alpha,
    eps = g.eps, weight_decay = g.weight_decay, momentum = g.momentum, centered = g.centered, maximize = g.maximize})
end

-- ---- Adagrad ------------------------------------------------------------------------------------
local Adagrad = optimizer_class("Adagrad", {lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0,
  eps = 1e-10, maximize = false})
function Adagrad.validate(g)
  if g.lr_decay < 0 then raise("ValueError", ("Adagrad: invalid lr_decay value: %g"):format(g.lr_decay)) end
  if g.initial_accumulator_value < 0 then
    raise("ValueError", ("Adagrad: invalid initial_accumulator_value value: %g"):format(g.initial_accumulator_value))
  end
end
function Adagrad.slots(g) return {{"sum", g.initial_accumulator_value}} end
function Adagrad.update(g, param, grad, S, step)
  if g.maximize then grad = -grad end
  if g.weight_decay ~= 0 then grad = grad:add(param, {alpha = g.weight_decay}) end
  local clr = g.lr / (1 + (step - 1) * g.lr_decay)
  S.sum:add_(grad * grad)
  param:add_(grad / S.sum:sqrt():add_(g.eps), {alpha = -clr})
end

function Adagrad.fused(g, params, grads, S, step)
  tc._fused_adagrad_(params, grads, S.sum, step, {lr = g.lr, lr_decay = g.lr_decay, weight_decay = g.weight_decay,
    eps = g.eps, maximize = g.maximize})
end

-- tc.optim.lr_scheduler is loaded on first use.
return setmetatable(optim, {__index = function(t, k)
  if k ~= "lr_scheduler" then return nil end
  local m = require "tc.optim.lr_scheduler"
  rawset(t, k, m)
  return m
end})
