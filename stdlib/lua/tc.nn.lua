-- tc.nn: Lua module classes with PyTorch's Module API (registration by assignment, dotted
-- 1-based names, state_dict, train/eval, hooks) and the standard layers, containers and losses.
-- Plain Lua over tc ops, so the tracer can inline every forward.
local tc = require "tc"
local raise = tc._C.raise
local F = require "tc.nn.functional"
local nn = {functional = F}

require("tc.utils_sd").install()

-- nn.Parameter(t[, requires_grad=true]): a detached leaf tensor marked as a parameter; assigning
-- one to a module field registers it (frozen ones too: nn.Parameter(t, false)).
local parameters = setmetatable({}, {__mode = "k"})
-- Every parameter and registered buffer has a number in `ids` (weak keys): named_parameters and
-- named_buffers list a tensor registered twice (a tied weight) once by it. A table keyed by the
-- tensors would do in plain Lua, but under tc.compile a tensor read from a module is a graph
-- input, and a table made in the trace with graph inputs as keys breaks the graph (TC0401).
local ids, last_id = setmetatable({}, {__mode = "k"}), 0
local function identify(t)
  if ids[t] == nil and tc.is_tensor(t) then last_id = last_id + 1; ids[t] = last_id end
end
nn._registered_tensors = ids  -- capture reads it: tc.compile's dynamic = true leaves these static
function nn.Parameter(t, requires_grad)
  if requires_grad == nil then requires_grad = true end
  if not tc.is_tensor(t) then raise("ValueError", "nn.Parameter(t): expected a tensor, got " .. type(t)) end
  t = t:detach()
  t.requires_grad = requires_grad
  parameters[t] = true
  identify(t)
  return t
end
function nn.is_parameter(t) return parameters[t] == true end

local function is_tensor(v) return tc.is_tensor(v) end
local function is_module(v) return type(v) == "table" and getmetatable(v) ~= nil and rawget(v, "_order") ~= nil end
-- Only tensors made by nn.Parameter register themselves (as in PyTorch): a result that requires
-- grad, stored on self in forward, is not a parameter.
local function is_param(v) return parameters[v] == true end
nn.is_module = is_module
tc._C.args.is_module = is_module

-- Class mechanism -------------------------------------------------------------------------------
local Module = {__name = "Module"}
Module.__index = Module
nn.Module = Module

local function module_newindex(self, key, value)
  -- First assignment of a key: remember the kind and order of modules, parameters and buffers.
  if type(key) == "string" and (is_module(value) or is_param(value)) then
    local kinds = rawget(self, "_kind")
    if kinds[key] == nil then
      local order = rawget(self, "_order")
      order[#order + 1] = key
    end
    kinds[key] = is_module(value) and "module" or "param"
  end
  rawset(self, key, value)
end

-- Full backward hooks (register_full_backward_hook), as torch.utils.hooks.BackwardHook: the
-- tensor arguments that require grad pass through one identity node (a view for one input, a cat
-- split back for several), so their gradients arrive together as grad_input; each tensor result
-- passes through a view whose tensor hook records grad_output. The hooks run when grad_input is
-- complete and may return a replacement array; with no input requiring grad they run once at the
-- end of the backward with grad_input all nil. Arrays keep the positions of the tensor arguments
-- and results (nil where there is no gradient).
local function run_backward_hooks(st, grads)
  local grad_input, changed = {}, false
  for j = 1, st.n_in do grad_input[j] = grads[j] end
  for _, h in ipairs(st.hooks) do
    local r = h(st.module, grad_input, st.grad_output)
    if r ~= nil then
      if type(r) ~= "table" or getmetatable(r) ~= nil then
        raise("ValueError", "a full backward hook must return nil or an array of gradients (one per tensor argument)")
      end
      if st.n_need == 0 and next(r) ~= nil then
        raise("ValueError", "a backward hook of a module where no input requires grad must return nil or an array of nils")
      end
      grad_input, changed = r, true
    end
  end
  return grad_input, changed
end

local function backward_hook_inputs(self, hooks, args)
  local st = {module = self, hooks = hooks, grad_output = {}, tensors = {}, need = {}}
  for i = 1, args.n do
    if is_tensor(args[i]) then st.tensors[#st.tensors + 1] = i end
  end
  for j, i in ipairs(st.tensors) do
    if args[i].requires_grad then st.need[#st.need + 1] = j end
  end
  st.n_in, st.n_need = #st.tensors, #st.need
  if st.n_need == 0 then return args, st end
  local new = {n = args.n}
  for i = 1, args.n do new[i] = args[i] end
  -- the replacement for input j: the hook's, zeros where it gave none (PyTorch's None)
  local function replaced(res, grads, j)
    local r = res[j]
    if r == nil then return tc.zeros_like(grads[j]) end
    if not is_tensor(r) or r.shape ~= grads[j].shape then
      raise("ShapeError", ("a full backward hook returned a gradient for argument %d that is not a tensor of shape %s"):format(
        st.tensors[j], tostring(grads[j].shape)))
    end
    return r
  end
  if st.n_need == 1 then
    local j = st.need[1]
    local x = args[st.tensors[j]]
    new[st.tensors[j]] = x:view_as(x)
    new[st.tensors[j]]:register_hook(function(g)
      local grads = {[j] = g}
      local res, changed = run_backward_hooks(st, grads)
      if changed then return replaced(res, grads, j) end
    end)
    return new, st
  end
  local flat, sizes, shapes = {}, {}, {}
  for k, j in ipairs(st.need) do
    local x = args[st.tensors[j]]
    if x.dtype ~= args[st.tensors[st.need[1]]].dtype or x.device ~= args[st.tensors[st.need[1]]].device then
      raise("NotImplementedError", "full backward hooks on a module whose tensor arguments that require grad differ in dtype or device")
    end
    flat[k], sizes[k], shapes[k] = x:reshape {-1}, x:numel(), x.shape
  end
  local joined = tc.cat(flat)
  for k, piece in ipairs(joined:split_with_sizes(sizes)) do new[st.tensors[st.need[k]]] = piece:view(shapes[k]) end
  joined:register_hook(function(g)
    local grads = {}
    for k, piece in ipairs(g:split_with_sizes(sizes)) do grads[st.need[k]] = piece:reshape(shapes[k]) end
    local res, changed = run_backward_hooks(st, grads)
    if not changed then return nil end
    local parts = {}
    for k, j in ipairs(st.need) do parts[k] = replaced(res, grads, j):reshape {-1} end
    return tc.cat(parts)
  end)
  return new, st
end

local function backward_hook_outputs(st, out)
  local k = 0
  for i = 1, out.n do
    if is_tensor(out[i]) then
      k = k + 1
      local pos = k
      if out[i].requires_grad then
        out[i] = out[i]:view_as(out[i])
        out[i]:register_hook(function(g)
          st.grad_output[pos] = g
          if st.n_need == 0 and not st.queued then
            st.queued = true
            tc.autograd.queue_callback(function() run_backward_hooks(st, {}) end)
          end
        end)
      end
    end
  end
end

-- m(...) runs forward through the hooks (PyTorch's order): pre-hooks hook(m, args) may return
-- a replacement array of arguments; forward hooks hook(m, args, output) may return a replacement
-- output (the first result; further results of forward pass through); full backward hooks see
-- the arguments after the pre-hooks and the results after the forward hooks.
local function module_call(self, ...)
  local pre, post = rawget(self, "_forward_pre_hooks"), rawget(self, "_forward_hooks")
  -- (a module with backward hooks has _forward_hooks too: two reads, two guards under tc.compile)
  if pre == nil and post == nil then return self:forward(...) end
  local bw = rawget(self, "_backward_hooks")
  local args = table.pack(...)
  for _, h in ipairs(pre or {}) do
    local r = h(self, args)
    if r ~= nil then
      if type(r) ~= "table" or getmetatable(r) ~= nil then
        raise("ValueError", "forward pre-hook must return nil or an array of arguments (use {x} for one argument)")
      end
      args = r
      args.n = args.n or #r
    end
  end
  local bstate
  if bw ~= nil and #bw > 0 and tc.is_grad_enabled() then args, bstate = backward_hook_inputs(self, bw, args) end
  local out = table.pack(self:forward(table.unpack(args, 1, args.n)))
  for _, h in ipairs(post or {}) do
    local r = h(self, args, table.unpack(out, 1, out.n))
    if r ~= nil then out[1] = r end
  end
  if bstate then backward_hook_outputs(bstate, out) end
  return table.unpack(out, 1, out.n)
end

local function module_tostring(self)
  local lines = {}
  local extra = self.extra_repr and self:extra_repr() or ""
  local children = {}
  for name, m in self:named_children() do children[#children + 1] = {name, m} end
  if #children == 0 then return self.__name .. "(" .. extra .. ")" end
  lines[1] = self.__name .. "(" .. extra
  for _, c in ipairs(children) do
    lines[#lines + 1] = "  (" .. c[1] .. "): " .. tostring(c[2]):gsub("\n", "\n  ")
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

-- `Block = nn.Module:extend("Block")`: a class inheriting methods; `Block(...)` makes an instance.
local new_instance
local metamethods = {"__newindex", "__call", "__tostring", "__close", "__len", "__eq", "__lt", "__le", "__concat",
                     "__add", "__sub", "__mul", "__div", "__unm"}
function Module:extend(name)
  local cls = {}
  -- Metamethods are not found through __index: each class carries its own copies.
  for _, mm in ipairs(metamethods) do cls[mm] = self[mm] end
  cls.__name = name or "Module"
  cls.__index = cls
  cls.super = self
  return setmetatable(cls, {__index = self, __call = new_instance})
end

function Module:new(...)
  local obj = setmetatable({training = true, _order = {}, _kind = {}}, self)
  obj:__init(...)
  return obj
end

function Module:__init() end
function Module:forward() error(self.__name .. ":forward() is not implemented", 2) end
Module.__newindex = module_newindex
-- Calls go through a C trampoline (tc._C.wrap_functions): `return m(x)` in user code is a tail
-- call, and without a C frame between, Lua would drop the user's frame and errors raised inside
-- the module could no longer name the user's line.
local function trampoline(f)
  if tc._C.wrap then return tc._C.wrap(f) end
  local t = {f = f}
  if tc._C.wrap_functions then tc._C.wrap_functions(t) end
  return t.f
end
Module.__call = trampoline(module_call)
new_instance = trampoline(function(c, ...) return c:new(...) end)
Module.__tostring = module_tostring
setmetatable(Module, {__call = trampoline(function(c, ...) return c:new(...) end)})

function Module:register_buffer(name, t, persistent)
  identify(t)
  local order = rawget(self, "_order")
  if rawget(self, "_kind")[name] == nil then order[#order + 1] = name end
  rawget(self, "_kind")[name] = persistent == false and "buffer_np" or "buffer"
  rawset(self, name, t)
end

function Module:register_parameter(name, t)
  if is_tensor(t) then parameters[t] = true; identify(t) end
  local order = rawget(self, "_order")
  if rawget(self, "_kind")[name] == nil then order[#order + 1] = name end
  rawget(self, "_kind")[name] = "param"
  rawset(self, name, t)
end

function Module:add_module(name, m)
  local order = rawget(self, "_order")
  if rawget(self, "_kind")[name] == nil then order[#order + 1] = name end
  rawget(self, "_kind")[name] = "module"
  rawset(self, name, m)
  return self
end

-- Iterates (name, value) over this module's own entries of one kind, in registration order.
local function own(self, kind)
  local order, kinds, i = rawget(self, "_order"), rawget(self, "_kind"), 0
  return function()
    while true do
      i = i + 1
      local key = order[i]
      if key == nil then return nil end
      local v = rawget(self, key)
      local k = kinds[key]
      if v ~= nil and (k == kind or (kind == "buffer" and k == "buffer_np")) then return key, v end
    end
  end
end

function Module:named_children() return own(self, "module") end
function Module:children()
  local out = {}
  for _, m in self:named_children() do out[#out + 1] = m end
  return out
end

-- All modules below and including self: {prefix, module} pairs, depth first, each module once.
local function walk(self, prefix, out, seen)
  if seen[self] then return out end
  seen[self] = true
  out[#out + 1] = {prefix, self}
  for name, m in self:named_children() do
    walk(m, prefix == "" and name or prefix .. "." .. name, out, seen)
  end
  return out
end

function Module:named_modules()
  local list, i = walk(self, "", {}, {}), 0
  return function()
    i = i + 1
    if list[i] then return list[i][1], list[i][2] end
  end
end

function Module:modules()
  local out = {}
  for _, m in self:named_modules() do out[#out + 1] = m end
  return out
end

-- Whether t is already in out, a tensor without a number (assigned into a buffer's slot) compared
-- with each.
local function listed(out, seen, t)
  local id = ids[t]
  if id ~= nil then
    if seen[id] then return true end
    seen[id] = true
    return false
  end
  for _, e in ipairs(out) do
    if rawequal(e[2], t) then return true end
  end
  return false
end

local function named_tensors(self, kind)
  local out, seen = {}, {}
  for prefix, m in self:named_modules() do
    for name, t in own(m, kind) do
      if not listed(out, seen, t) then out[#out + 1] = {prefix == "" and name or prefix .. "." .. name, t} end
    end
  end
  local i = 0
  return function()
    i = i + 1
    if out[i] then return out[i][1], out[i][2] end
  end
end

function Module:named_parameters() return named_tensors(self, "param") end
function Module:named_buffers() return named_tensors(self, "buffer") end
function Module:parameters()
  local out = {}
  for _, p in self:named_parameters() do out[#out + 1] = p end
  return out
end
function Module:buffers()
  local out = {}
  for _, b in self:named_buffers() do out[#out + 1] = b end
  return out
end

-- Entries of state_dict: {name, tensor} in PyTorch's order: modules depth first (a module
-- before its children), in each its parameters then its persistent buffers, by registration.
local function state_entries(self)
  local out = {}
  for prefix, m in self:named_modules() do
    local kinds, order = rawget(m, "_kind"), rawget(m, "_order")
    for _, want in ipairs {"param", "buffer"} do
      for _, name in ipairs(order) do
        local v = rawget(m, name)
        if v ~= nil and kinds[name] == want then
          out[#out + 1] = {prefix == "" and name or prefix .. "." .. name, v}
        end
      end
    end
  end
  return out
end

-- {name = tensor} of parameters and persistent buffers (detached, sharing storage).
function Module:state_dict()
  local sd = {}
  for _, e in ipairs(state_entries(self)) do sd[e[1]] = e[2]:detach() end
  return sd
end

-- The state_dict's keys in registration order (Lua tables have none).
function Module:state_dict_keys()
  local keys = {}
  for i, e in ipairs(state_entries(self)) do keys[i] = e[1] end
  return keys
end

local function quoted(list)
  local q = {}
  for i, k in ipairs(list) do q[i] = '"' .. k .. '"' end
  return table.concat(q, ", ")
end

-- Copies the tensors of sd into this module's parameters and buffers, in place. Returns
-- {missing_keys=, unexpected_keys=} (sorted). With strict (the default) missing or unexpected
-- keys raise a ValueError naming them; a shape mismatch always raises a ShapeError. Nothing is
-- copied when an error is raised.
function Module:load_state_dict(sd, opts)
  if type(sd) ~= "table" then raise("ValueError", "load_state_dict(sd): expected a table of name = tensor, got " .. type(sd)) end
  local strict = not (opts and opts.strict == false)
  local entries, own, missing, unexpected, mismatched = state_entries(self), {}, {}, {}, {}
  for _, e in ipairs(entries) do
    own[e[1]] = e[2]
    local src = sd[e[1]]
    if src == nil then
      missing[#missing + 1] = e[1]
    elseif not is_tensor(src) then
      raise("ValueError", ("load_state_dict: value for '%s' is a %s, not a tensor"):format(e[1], type(src)))
    elseif src.shape ~= e[2].shape then
      mismatched[#mismatched + 1] = ("size mismatch for %s: copying a param with shape %s from checkpoint, the shape in current model is %s."):format(
        e[1], tostring(src.shape), tostring(e[2].shape))
    end
  end
  for key in pairs(sd) do
    if own[key] == nil then unexpected[#unexpected + 1] = tostring(key) end
  end
  table.sort(missing)
  table.sort(unexpected)
  local problems = {}
  if strict and #unexpected > 0 then problems[#problems + 1] = "Unexpected key(s) in state_dict: " .. quoted(unexpected) .. "." end
  if strict and #missing > 0 then problems[#problems + 1] = "Missing key(s) in state_dict: " .. quoted(missing) .. "." end
  table.sort(mismatched)
  for _, m in ipairs(mismatched) do problems[#problems + 1] = m end
  if #problems > 0 then
    raise(#mismatched > 0 and "ShapeError" or "ValueError", ("Error(s) in loading state_dict for %s:\n\t%s"):format(
      self.__name, table.concat(problems, "\n\t")))
  end
  for _, e in ipairs(entries) do
    local src = sd[e[1]]
    if src ~= nil then e[2]:detach():copy_(src) end
  end
  return {missing_keys = missing, unexpected_keys = unexpected}
end

function Module:train(mode)
  if mode == nil then mode = true end
  for _, m in self:named_modules() do rawset(m, "training", mode) end
  return self
end
function Module:eval() return self:train(false) end

function Module:apply(fn)
  for _, m in ipairs(self:children()) do m:apply(fn) end
  fn(self)
  return self
end

-- Parameters that m:to()/cuda()/half() ... replaced by a converted copy: old -> new (weak keys).
-- An optimizer built before the conversion follows it (tc.optim: the new parameter and its state
-- take the old one's place), as PyTorch's optimizers keep working after model.cuda().
local replaced = setmetatable({}, {__mode = "k"})
function nn._replacement(p)
  local r = replaced[p]
  while r ~= nil and replaced[r] ~= nil do r = replaced[r] end
  return r
end

-- Applies fn to every parameter and buffer, replacing them (keeps requires_grad of parameters,
-- converts their .grad the same way).
function Module:_apply(fn)
  for _, m in self:named_modules() do
    local kinds = rawget(m, "_kind")
    for _, name in ipairs(rawget(m, "_order")) do
      local k, v = kinds[name], rawget(m, name)
      if v ~= nil and k ~= "module" then
        local nv = fn(v)
        if not rawequal(nv, v) then
          if k == "param" then
            nv = nn.Parameter(nv, v.requires_grad)
            local g = v.grad
            if g ~= nil then nv.grad = fn(g) end
            replaced[v] = nv
          end
          identify(nv)
          rawset(m, name, nv)
        end
      end
    end
  end
  return self
end

function Module:to(...)
  local args = table.pack(...)
  return self:_apply(function(t) return t:to(table.unpack(args, 1, args.n)) end)
end
function Module:cuda() return self:to("cuda") end
function Module:cpu() return self:to("cpu") end
function Module:float() return self:_apply(function(t) return t.dtype.is_floating_point and t:float() or t end) end
function Module:double() return self:_apply(function(t) return t.dtype.is_floating_point and t:double() or t end) end
function Module:half() return self:_apply(function(t) return t.dtype.is_floating_point and t:half() or t end) end
function Module:bfloat16() return self:_apply(function(t) return t.dtype.is_floating_point and t:bfloat16() or t end) end

-- m:requires_grad_(flag = true): sets requires_grad of every parameter (freezing or unfreezing).
function Module:requires_grad_(flag)
  if flag == nil then flag = true end
  if type(flag) ~= "boolean" then raise("ValueError", "requires_grad_(): expected a boolean, got " .. type(flag)) end
  for _, p in ipairs(self:parameters()) do p.requires_grad = flag end
  return self
end

-- m:zero_grad({set_to_none = true}): gradients become nil, or are zeroed in place with false.
function Module:zero_grad(opts) nn.utils.zero_grad(self:parameters(), opts) end

function Module:register_forward_hook(fn)
  local hooks = rawget(self, "_forward_hooks") or {}
  rawset(self, "_forward_hooks", hooks)
  hooks[#hooks + 1] = fn
  return {remove = function() for i, h in ipairs(hooks) do if h == fn then table.remove(hooks, i) end end end}
end

-- hook(module, grad_input, grad_output) -> nil or a replacement grad_input (see module_call).
function Module:register_full_backward_hook(fn)
  local mt = getmetatable(fn)
  if type(fn) ~= "function" and not (type(mt) == "table" and mt.__call ~= nil) then
    raise("ValueError", "register_full_backward_hook(hook): expected a function, got " .. type(fn))
  end
  local hooks = rawget(self, "_backward_hooks") or {}
  rawset(self, "_backward_hooks", hooks)
  if rawget(self, "_forward_hooks") == nil then rawset(self, "_forward_hooks", {}) end  -- module_call's fast path
  hooks[#hooks + 1] = fn
  return {remove = function() for i, h in ipairs(hooks) do if h == fn then table.remove(hooks, i) end end end}
end

function Module:register_forward_pre_hook(fn)
  local hooks = rawget(self, "_forward_pre_hooks") or {}
  rawset(self, "_forward_pre_hooks", hooks)
  hooks[#hooks + 1] = fn
  return {remove = function() for i, h in ipairs(hooks) do if h == fn then table.remove(hooks, i) end end end}
end

-- Compiles forward in place (tc.compile returns it unchanged until capture lands).
function Module:compile(opts)
  local cls_forward = self.forward
  rawset(self, "forward", tc.compile(cls_forward, opts))
  return self
end

-- Torch7 aliases
Module.training_mode = Module.train
Module.evaluate = Module.eval

require("tc.nn.layers")(nn, tc, F)
nn.utils = require "tc.nn.utils"
-- nn.parallel (DistributedDataParallel) on first use: it needs tc.distributed and tc.nn itself.
setmetatable(nn, {__index = function(t, k)
  if k ~= "parallel" then return nil end
  local m = require "tc.nn.parallel"
  rawset(t, k, m)
  return m
end})
return nn
