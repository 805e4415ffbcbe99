-- tc.export and tc.aot: ahead-of-time packages (docs/aot.md).
--
--   local ep = tc.export(model.layers[1], {x}, {dynamic = {x = {1}}})  -- one graph, weights lifted
--   print(ep)                                                           -- its code and signature
--   tc.aot.compile(ep, {path = "layer.tcpkg", device = "cpu", package_constants = false})
--   local pkg = tc.aot.load("layer.tcpkg")                              -- no tracing, no codegen
--   pkg:load_constants(model.layers[1]:state_dict(), {strict = true})
--   local y = pkg(x)
--
-- The native half (the graph's lowering and code generation, the package file, the loader) is
-- aot/ in C++, installed by tcrun as package.loaded["tc._aot_native"].
local tc = require "tc"
local raise, is_tensor = tc._C.raise, tc._C.is_tensor

local M = {}

-- What lacks the compiler and what to do: stock lua5.4 runs the script with tcrun; a C++ program
-- that embeds tc (its Runtime's host name) calls tc::vm::install_compiler, as tc.compile's notice says.
local function no_compiler(what)
  local host = tc._C.host()
  if host == nil then
    raise("CompileError", what .. " needs tc's compiler, which this Lua does not have (stock lua5.4 loads tc without it): run the script with tcrun")
  end
  raise("CompileError", ("%s needs tc's compiler, which this program (%s) embeds tc without: "
    .. "call tc::vm::install_compiler(runtime) from tc/vm/compiler.h and link tc::tc"):format(what, host))
end

local function native(what)
  local n = package.loaded["tc._aot_native"]
  if n == nil then no_compiler(what) end
  return n
end

local function is_module(m) return type(m) == "table" and type(m.forward) == "function" end

-- "layers[3].linear1.weight" -> "layers.3.linear1.weight" (the state dict's names)
local function state_name(path)
  local s = path:gsub("%[(%d+)%]", ".%1"):gsub('%["([^"]*)"%]', ".%1")
  return (s:gsub("^%.", ""))
end

-- The parameter names of a Lua function (after `skip` of them), for naming inputs.
local function param_names(fn, skip)
  local names = {}
  if type(fn) ~= "function" then return names end
  for i = 1 + skip, 255 do
    local n = debug.getlocal(fn, i)
    if n == nil or n:sub(1, 1) == "(" then break end
    names[#names + 1] = n
  end
  return names
end

local Exported = {}
Exported.__index = Exported
Exported.__name = "tc.ExportedProgram"

-- The graph's listing, its inputs named as the export names them (input names; constants with
-- dots as underscores: %layers_1_linear1_weight).
function Exported:code()
  if self._code == nil then
    local names = {}
    for k, gi in ipairs(self.spec.graph_inputs) do
      names[k] = gi.constant and self.spec.constant_names[gi.index] or self.spec.input_names[gi.index]
    end
    self._code = native("ExportedProgram:code()").code(self.graph, names)
  end
  return self._code
end

function Exported:__tostring()
  local lines = {"ExportedProgram:"}
  for line in (self:code() .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = "    " .. line end
  local ins = {}
  for i, n in ipairs(self.input_names) do ins[i] = n end
  lines[#lines + 1] = "Inputs: " .. table.concat(ins, ", ")
  lines[#lines + 1] = ("State dict (%d tensors):"):format(#self.constant_names)
  for _, n in ipairs(self.constant_names) do
    local t = self.state_dict[n]
    local dims = {}
    for d = 1, t:dim() do dims[d] = tostring(t:size(d)) end
    lines[#lines + 1] = ("    %s: %s[%s]"):format(n, tostring(t.dtype):gsub("^tc%.", ""), table.concat(dims, ", "))
  end
  return table.concat(lines, "\n")
end

local counter = 0

-- tc.export(fn_or_module, example_args, {dynamic = {name_or_index = {dims...}}}) -> ExportedProgram
function M.export(f, args, opts)
  -- capture's install lists the backends; without it tc.compile runs functions unchanged
  if tc.compiler._backends == nil then no_compiler("tc.export()") end
  local module = is_module(f) and f or nil
  local mt = getmetatable(f)
  if module == nil and type(f) ~= "function" and not (type(mt) == "table" and mt.__call) then
    raise("ValueError", "tc.export(): expected a function or a module, got " .. type(f))
  end
  if type(args) ~= "table" then raise("ValueError", "tc.export(f, args): args must be a list of example tensors, got " .. type(args)) end
  opts = opts or {}
  if type(opts) ~= "table" then raise("ValueError", "tc.export(): opts must be a table, got " .. type(opts)) end
  for k in pairs(opts) do
    if k ~= "dynamic" then raise("ValueError", ("tc.export() got an unexpected option '%s' (options: dynamic)"):format(tostring(k))) end
  end
  local names = param_names(module and module.forward or f, module and 1 or 0)
  local ex = {}
  for i = 1, #args do
    if not is_tensor(args[i]) then
      raise("ValueError", ("tc.export(): example argument %d is a %s; exported programs take tensors"):format(i, type(args[i])))
    end
    names[i] = names[i] or ("arg" .. i)
    ex[i] = args[i]:is_contiguous() and args[i] or args[i]:contiguous()
  end
  local ranges = {}  -- per input: {{dim, min, max}, ...} (1-based dims)
  for k, dims in pairs(opts.dynamic or {}) do
    local i = k
    if type(k) == "string" then
      for j, n in ipairs(names) do if n == k then i = j end end
    end
    if math.type(i) ~= "integer" or ex[i] == nil then
      raise("ValueError", ("tc.export(): dynamic names input '%s', which is not one of the %d example inputs (%s)"):format(
        tostring(k), #ex, table.concat(names, ", ")))
    end
    if ex[i] == args[i] then ex[i] = args[i]:clone() end  -- the mark stays on our copy
    -- each entry: a dim, or {dim, min =, max =} (torch.export's Dim(min, max)): the package then
    -- refuses sizes outside [min, max]
    if type(dims) ~= "table" then dims = {dims} end
    for _, d in ipairs(dims) do
      if type(d) == "table" then
        local dim = d[1]
        tc.compiler.mark_dynamic(ex[i], dim, {min = d.min, max = d.max})
        ranges[i] = ranges[i] or {}
        local nd = ex[i]:dim()
        ranges[i][#ranges[i] + 1] = {dim < 0 and nd + 1 + dim or dim, d.min or 2, d.max or math.maxinteger}
      else
        tc.compiler.mark_dynamic(ex[i], d)
      end
    end
  end

  counter = counter + 1
  local captured
  local function backend(gm, inputs)
    captured = {gm = gm, inputs = inputs}
    return function(...) return gm:forward(...) end
  end
  -- A chunk name of its own per export (the compiler keys its caches by source and line), so that
  -- no earlier export's cache entry, nor the dynamic dims an earlier export's shapes taught it,
  -- answers this one; the chunk counts as tc's own code, so errors name the user's lines.
  local src = module and "local _, id = ... return function(m, ...) local _ = id return m(...) end"
                      or "local f, id = ... return function(...) local _ = id return f(...) end"
  local wrapper = load(src, "@[tc]/tc.export#" .. counter)(module or f, "tc.export#" .. counter)
  -- An export always traces: tcrun --eager (tc.config.eager) and a stance such as force_eager
  -- are set aside for it.
  local saved_eager, saved_stance = tc.config.eager, tc.compiler.stance
  tc.config.eager = false
  if saved_stance ~= "default" then tc.compiler.set_stance("default") end
  local ok, results = pcall(function()
    local compiled = tc.compile(wrapper, {backend = backend, fullgraph = true})
    if module then return table.pack(compiled(module, table.unpack(ex, 1, #ex))) end
    return table.pack(compiled(table.unpack(ex, 1, #ex)))
  end)
  tc.config.eager = saved_eager
  if saved_stance ~= "default" then tc.compiler.set_stance(saved_stance) end
  if not ok then error(results, 0) end
  if captured == nil then raise("ValueError", "tc.export(): the function made no graph (it computes nothing with tensors)") end
  local gm = captured.gm
  local nodes = gm.nodes
  local n_out = #nodes[#nodes].args
  for i = 1, results.n do
    if not is_tensor(results[i]) then
      raise("ValueError", ("tc.export(): result %d of the function is a %s; exported programs return tensors"):format(i, type(results[i])))
    end
  end
  if results.n ~= n_out then
    raise("ValueError", ("tc.export(): the function returns %d tensors but its graph has %d outputs (side effects on tables, or a result returned twice, cannot be exported)"):format(results.n, n_out))
  end

  -- every example input's dtype and sizes (an input the graph never reads keeps these)
  local input_specs = {}
  for i, t in ipairs(ex) do
    local sizes = {}
    for d = 1, t:dim() do sizes[d] = t:size(d) end
    input_specs[i] = {dtype = tostring(t.dtype):gsub("^tc%.", ""), shape = sizes, ranges = ranges[i]}
  end
  local spec = {graph_inputs = {}, input_names = names, input_specs = input_specs, constant_names = {}}
  local state = {}
  -- the module's own names for its tensors (its state dict's: containers' internals left out)
  local own_name = {}
  if module and module.named_parameters then
    for n, t in module:named_parameters() do own_name[t] = n end
    for n, t in module:named_buffers() do own_name[t] = n end
  end
  local first = module and 2 or 1
  local k = 0
  for _, n in ipairs(nodes) do
    if n.op == "placeholder" then
      k = k + 1
      local src_path = n.target
      local argi = tonumber(src_path:match("^arg%[(%d+)%]$"))
      if argi and argi >= first then
        spec.graph_inputs[k] = {constant = false, index = argi - first + 1}
      else
        local name
        if own_name[captured.inputs[k]] then
          name = own_name[captured.inputs[k]]
        elseif module and src_path:sub(1, 7) == "arg[1]." then
          name = state_name(src_path:sub(8))
        elseif src_path:match("^arg%[") then
          raise("ValueError", ("tc.export(): the graph reads tensor %s from inside an argument; exported programs take tensors as arguments"):format(src_path))
        else
          -- a tensor read from an upvalue ("function <f.lua:3>.<upvalue w>.weight" -> "w.weight")
          -- or a global: named by its source
          name = state_name((src_path:gsub("^function <[^>]*>%.", ""):gsub("<upvalue ([%w_]+)>", "%1")))
        end
        if state[name] == nil then
          spec.constant_names[#spec.constant_names + 1] = name
          state[name] = captured.inputs[k]
        end
        local idx
        for j, c in ipairs(spec.constant_names) do if c == name then idx = j end end
        spec.graph_inputs[k] = {constant = true, index = idx}
      end
    end
  end
  return setmetatable({graph = gm, spec = spec, state_dict = state, input_names = names,
                       constant_names = spec.constant_names, example_outputs = results}, Exported)
end

local compile_keys = {path = "string", device = "string", package_constants = "boolean", arch = "number"}

-- tc.aot.compile(exported, {path =, device = "cpu", package_constants = false, arch = 90}) -> path, report
-- (arch: device "cuda" only, the sm_ number; default: GPU 0's, or 90 without a GPU)
function M.compile(ep, opts)
  if getmetatable(ep) ~= Exported then
    raise("ValueError", "tc.aot.compile(): expected an exported program (tc.export), got " .. type(ep))
  end
  opts = opts or {}
  for k, v in pairs(opts) do
    if compile_keys[k] == nil then
      raise("ValueError", ("tc.aot.compile() got an unexpected option '%s' (options: path, device, package_constants, arch)"):format(tostring(k)))
    end
    if type(v) ~= compile_keys[k] then
      raise("ValueError", ("tc.aot.compile(): option '%s' must be a %s, got %s"):format(k, compile_keys[k], type(v)))
    end
  end
  if opts.path == nil then raise("ValueError", 'tc.aot.compile(): opts.path is required (path = "model.tcpkg")') end
  local spec = ep.spec
  spec.code = ep:code()
  if opts.package_constants then
    spec.constant_values = {}
    for i, n in ipairs(spec.constant_names) do spec.constant_values[i] = ep.state_dict[n] end
  else
    spec.constant_values = nil
  end
  local report = native("tc.aot.compile").compile(ep.graph, spec,
    {path = opts.path, device = opts.device or "cpu", package_constants = opts.package_constants == true, arch = opts.arch})
  return opts.path, report
end

-- tc.aot.load(path [, {device = "cuda:1"}]) -> package: pkg(...) runs it;
-- pkg:load_constants(sd, {strict = true}); pkg:manifest(); pkg:constants(). `device` picks the
-- GPU of a CUDA package (default cuda:0).
function M.load(path, opts)
  if type(path) ~= "string" then raise("ValueError", "tc.aot.load(path): expected a string, got " .. type(path)) end
  if opts ~= nil and type(opts) ~= "table" then raise("ValueError", "tc.aot.load(path, opts): opts must be a table, got " .. type(opts)) end
  for k in pairs(opts or {}) do
    if k ~= "device" then raise("ValueError", ("tc.aot.load() got an unexpected option '%s' (options: device)"):format(tostring(k))) end
  end
  return native("tc.aot.load").load(path, opts)
end

return M
