-- tc.nn: Lua module classes with PyTorch's Module API (registration by assignment, dotted
-- 1-based names, state_dict, train/eval, hooks) and the standard layers, containers and losses.
-- Plain Lua over tc ops, so the tracer can inline every forward.
local tc = require "tc"
local F = require "tc.nn.functional"
local nn = {functional = F}

-- Parameters are tensors with requires_grad set; assigning one to a module field registers it.
function nn.Parameter(t, requires_grad)
  if requires_grad == nil then requires_grad = true end
  t = t:detach()
  t.requires_grad = requires_grad
  return t
end

local function is_tensor(v) return tc.is_tensor(v) end
local function is_module(v) return type(v) == "table" and getmetatable(v) ~= nil and rawget(v, "_order") ~= nil end

-- Class mechanism -------------------------------------------------------------------------------
local Module = {__name = "Module"}
Module.__index = Module
nn.Module = Module

local function module_newindex(self, key, value)
  -- First assignment of a key: remember the kind and order of modules, parameters and buffers.
  if type(key) == "string" and (is_module(value) or (is_tensor(value) and value.requires_grad)) then
    local order = rawget(self, "_order")
    order[#order + 1] = key
    rawget(self, "_kind")[key] = is_module(value) and "module" or "param"
  end
  rawset(self, key, value)
end

local function module_call(self, ...)
  local hooks = rawget(self, "_forward_pre_hooks")
  local args = table.pack(...)
  if hooks then
    for _, h in ipairs(hooks) do
      local r = h(self, table.unpack(args, 1, args.n))
      if r ~= nil then args = table.pack(r) end
    end
  end
  local out = table.pack(self:forward(table.unpack(args, 1, args.n)))
  local fhooks = rawget(self, "_forward_hooks")
  if fhooks then
    for _, h in ipairs(fhooks) do
      local r = h(self, args, table.unpack(out, 1, out.n))
      if r ~= nil then out = table.pack(r) end
    end
  end
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
function Module:extend(name)
  local cls = {}
  for _, mm in ipairs {"__newindex", "__call", "__tostring", "__close"} do cls[mm] = rawget(self, mm) end
  cls.__name = name or "Module"
  cls.__index = cls
  cls.super = self
  return setmetatable(cls, {__index = self, __call = function(c, ...) return c:new(...) end})
end

function Module:new(...)
  local obj = setmetatable({training = true, _order = {}, _kind = {}}, self)
  obj:__init(...)
  return obj
end

function Module:__init() end
function Module:forward() error(self.__name .. ":forward() is not implemented", 2) end
Module.__newindex = module_newindex
Module.__call = module_call
Module.__tostring = module_tostring
setmetatable(Module, {__call = function(c, ...) return c:new(...) end})

function Module:register_buffer(name, t, persistent)
  local order = rawget(self, "_order")
  if rawget(self, "_kind")[name] == nil then order[#order + 1] = name end
  rawget(self, "_kind")[name] = persistent == false and "buffer_np" or "buffer"
  rawset(self, name, t)
end

function Module:register_parameter(name, t)
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

local function named_tensors(self, kind)
  local out, seen = {}, {}
  for prefix, m in self:named_modules() do
    for name, t in own(m, kind) do
      if not seen[t] then
        seen[t] = true
        out[#out + 1] = {prefix == "" and name or prefix .. "." .. name, t}
      end
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

function Module:state_dict()
  local sd = {}
  for prefix, m in self:named_modules() do
    local kinds = rawget(m, "_kind")
    for _, name in ipairs(rawget(m, "_order")) do
      local k, v = kinds[name], rawget(m, name)
      if v ~= nil and (k == "param" or k == "buffer") then
        sd[prefix == "" and name or prefix .. "." .. name] = v:detach()
      end
    end
  end
  return sd
end

-- Copies tensors in place; returns {missing_keys=, unexpected_keys=}. strict (default) raises a
-- ValueError listing both.
function Module:load_state_dict(sd, opts)
  local strict = not (opts and opts.strict == false)
  local own_sd, missing, unexpected = self:state_dict(), {}, {}
  local targets = {}
  for prefix, m in self:named_modules() do
    local kinds = rawget(m, "_kind")
    for _, name in ipairs(rawget(m, "_order")) do
      if kinds[name] == "param" or kinds[name] == "buffer" then
        targets[prefix == "" and name or prefix .. "." .. name] = rawget(m, name)
      end
    end
  end
  for key in pairs(own_sd) do
    if sd[key] == nil then missing[#missing + 1] = key end
  end
  for key in pairs(sd) do
    if own_sd[key] == nil then unexpected[#unexpected + 1] = key end
  end
  table.sort(missing)
  table.sort(unexpected)
  if strict and (#missing > 0 or #unexpected > 0) then
    tc.raise("ValueError", string.format("error(s) in loading state_dict for %s: missing keys: [%s]; unexpected keys: [%s]",
      self.__name, table.concat(missing, ", "), table.concat(unexpected, ", ")), 2)
  end
  for key, t in pairs(targets) do
    local src = sd[key]
    if src ~= nil then
      if tostring(src:size()) ~= tostring(t:size()) then
        tc.raise("ShapeError", string.format("size mismatch for %s: copying a param with shape %s from checkpoint, the shape in current model is %s",
          key, tostring(src:size()), tostring(t:size())), 2)
      end
      t:detach():copy_(src)
    end
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

-- Applies fn to every parameter and buffer, replacing them (keeps requires_grad of parameters).
function Module:_apply(fn)
  for _, m in self:named_modules() do
    local kinds = rawget(m, "_kind")
    for _, name in ipairs(rawget(m, "_order")) do
      local k, v = kinds[name], rawget(m, name)
      if v ~= nil and k ~= "module" then
        local nv = fn(v)
        if k == "param" then nv = nn.Parameter(nv, v.requires_grad) end
        rawset(m, name, nv)
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
function Module:float() return self:_apply(function(t) return tc.is_floating_point(t) and t:float() or t end) end
function Module:double() return self:_apply(function(t) return tc.is_floating_point(t) and t:double() or t end) end
function Module:half() return self:_apply(function(t) return tc.is_floating_point(t) and t:half() or t end) end

function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do p.grad = nil end
end

function Module:register_forward_hook(fn)
  local hooks = rawget(self, "_forward_hooks") or {}
  rawset(self, "_forward_hooks", hooks)
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
return nn
