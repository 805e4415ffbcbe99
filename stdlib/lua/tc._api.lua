-- tc's module-level Lua API beyond the op table: creation sugar (arange(n), *_like), grad mode
-- (no_grad/enable_grad), tc.config, tc.compile and tc.compiler for the uncompiled runtime, and
-- lazy access to the preloaded submodules (tc.nn, tc.optim ...).
local tc, T, C = ...
local raise, is_tensor = C.raise, C.is_tensor
local select, type, pairs, setmetatable = select, type, pairs, setmetatable

-- A trailing plain table with string keys is an options table (the binder's rule).
local function is_options(t)
  if type(t) ~= "table" or getmetatable(t) ~= nil then return false end
  for k in pairs(t) do
    if type(k) == "string" then return true end
  end
  return false
end
local function split_options(...)
  local n = select("#", ...)
  if n > 0 and is_options((select(n, ...))) then return (select(n, ...)), n - 1 end
  return nil, n
end
tc._C.is_options, tc._C.split_options = is_options, split_options

-- ---- creation sugar -----------------------------------------------------------------------------
local arange = tc.arange
function tc.arange(...)
  local opts, n = split_options(...)
  local a, b, c = ...
  if n < 3 then c = nil end  -- with fewer numbers, the third value is the options table
  if n == 1 then a, b = 0, a end
  if n < 1 or n > 3 then raise("ValueError", "arange(): expected arange(end), arange(start, end) or arange(start, end, step)") end
  if opts then return arange(a, b, c or 1, opts) end
  return arange(a, b, c or 1)
end

-- tc.randint(high, size) as well as tc.randint(low, high, size)
local randint = tc.randint
function tc.randint(...)
  local opts, n = split_options(...)
  local a, b, c = ...
  if n == 2 then a, b, c = 0, a, b end
  if opts then return randint(a, b, c, opts) end
  return randint(a, b, c)
end

-- *_like: the shape of x; dtype and device of x unless the options say otherwise.
local function like_options(x, opts, name)
  if not is_tensor(x) then raise("ValueError", name .. "(): expected a tensor, got " .. type(x)) end
  if opts ~= nil and not is_options(opts) then
    raise("ValueError", name .. "(): options must be a table with string keys such as {dtype = tc.float64}")
  end
  local o = {dtype = x.dtype, device = x.device}
  for k, v in pairs(opts or {}) do o[k] = v end
  return o
end
for _, name in ipairs {"zeros", "ones", "empty", "rand", "randn"} do
  local f = tc[name]
  tc[name .. "_like"] = function(x, opts)
    local o = like_options(x, opts, name .. "_like")
    return f(x.shape, o)
  end
end
function tc.full_like(x, value, opts)
  local o = like_options(x, opts, "full_like")
  return tc.full(x.shape, value, o)
end
function tc.randint_like(x, lo, hi, opts)
  if type(hi) == "table" then hi, opts = nil, hi end
  local o = like_options(x, opts, "randint_like")
  if hi == nil then lo, hi = 0, lo end
  if not o.dtype.is_floating_point and o.dtype ~= tc.bool then
    return tc.randint(lo, hi, x.shape, o)
  end
  return tc.randint(lo, hi, x.shape, {device = o.device}):to(o.dtype)
end

-- ---- grad mode ----------------------------------------------------------------------------------
local set_grad, is_grad = tc.set_grad_enabled, tc.is_grad_enabled
local guard_mt = {__close = function(g) set_grad(g.prev) end, __name = "tc.grad_mode"}

-- tc.no_grad(): `do local _ <close> = tc.no_grad() ... end`; tc.no_grad(f, ...): runs f with
-- grad disabled and returns its results. The previous mode is restored even on error.
local function grad_mode(enabled, f, ...)
  local prev = is_grad()
  set_grad(enabled)
  if f == nil then return setmetatable({prev = prev}, guard_mt) end
  local r = table.pack(pcall(f, ...))
  set_grad(prev)
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end
function tc.no_grad(f, ...) return grad_mode(false, f, ...) end
function tc.enable_grad(f, ...) return grad_mode(true, f, ...) end
-- tc.inference_mode([mode]) and tc.inference_mode(f, ...): torch.inference_mode's two forms. tc has
-- no inference tensors, so inference mode is grad mode off; as in torch, mode = false turns grad
-- mode on (and inference mode off). tc.is_inference_mode_enabled() tells which is in force.
local inference_on = false
local inference_mt = {__close = function(g) set_grad(g.prev); inference_on = g.inference end, __name = "tc.inference_mode"}
function tc.inference_mode(f, ...)
  local mode = true
  if f == true or f == false then mode, f = f, nil end
  local prev, prev_inference = is_grad(), inference_on
  set_grad(not mode)
  inference_on = mode
  if f == nil then return setmetatable({prev = prev, inference = prev_inference}, inference_mt) end
  local r = table.pack(pcall(f, ...))
  set_grad(prev)
  inference_on = prev_inference
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end
function tc.is_inference_mode_enabled() return inference_on end

-- The decorator habit (`@torch.no_grad()` on a def): tc.no_grad_fn(f) returns a function that runs
-- f(...) with grad disabled (tc.no_grad(f) calls f at once). Likewise enable_grad_fn and
-- inference_mode_fn.
local function grad_mode_fn(name, enabled)
  return function(f)
    local mt = getmetatable(f)
    if type(f) ~= "function" and not (type(mt) == "table" and mt.__call ~= nil) then
      raise("ValueError", ("tc.%s(f): expected a function, got %s"):format(name, type(f)))
    end
    return function(...) return grad_mode(enabled, f, ...) end
  end
end
tc.no_grad_fn = grad_mode_fn("no_grad_fn", false)
tc.enable_grad_fn = grad_mode_fn("enable_grad_fn", true)
tc.inference_mode_fn = function(f)
  grad_mode_fn("inference_mode_fn", false)(f)  -- the check
  return function(...) return tc.inference_mode(f, ...) end
end

-- ---- configuration (tcrun's options land here) --------------------------------------------------
-- tc.config checks what is written into it: an unknown key (a typo such as recompile_limt) or a
-- value of the wrong type raises ValueError naming the key; nil puts a setting back to its default.
-- Readers (the C side included) see the values through __index.
local config_defaults = {
  backend = "tc", mode = "default", fullgraph = false, dynamic = nil, eager = false,
  explain = false, log = os.getenv("TC_LOGS") or "", cache_dir = os.getenv("TC_CACHE_DIR"),
  no_cache = false, recompile_limit = 8,
  -- mode = "reduce-overhead": CUDA graphs per compiled graph, one per input size (more run without)
  cudagraph_max_sizes = 8,
  -- bounds of one trace (past one: a graph break, TC0405/TC0406/TC0410, and the rest runs eagerly)
  trace_max_instructions = 50000, trace_max_depth = 64, trace_max_iterations = 5000,
  -- what one trace may cost (past one: the function runs uncompiled, one log line; an error
  -- under fullgraph): guards of its entry, memory its records hold (MB), wall time (ms)
  trace_max_guards = 20000, trace_max_memory_mb = 256, trace_max_ms = 5000,
  -- trace_pure_lua_instructions (nil: 2000 under tcrun --compile-all, else 0 = never): a trace
  -- that runs this many instructions without a tensor is given up and the function runs
  -- uncompiled, as do its later calls without a tensor argument or upvalue (TC_LOGS=skips)
  -- compiled training: recompute cheap pointwise values in the backward instead of saving them
  aot_recompute = true,
  -- dims that turned dynamic in a function's recompiles are kept in the cache directory and start
  -- dynamic in the next run of the same code (capture/remembered_dynamic.h); TC_REMEMBER_DYNAMIC=0
  -- or false here turns it off, as does --no-cache
  remember_dynamic = os.getenv("TC_REMEMBER_DYNAMIC") ~= "0",
}
-- what each setting takes ("count": an integer >= 0); device and compile_all are set by tcrun
local config_types = {
  backend = "string or function", mode = "string", fullgraph = "boolean", dynamic = "boolean",
  eager = "boolean", explain = "boolean or string", log = "string", cache_dir = "string",
  no_cache = "boolean", recompile_limit = "count", cudagraph_max_sizes = "count",
  trace_max_instructions = "count", trace_max_depth = "count", trace_max_iterations = "count",
  trace_max_guards = "count", trace_max_memory_mb = "count", trace_max_ms = "count",
  trace_pure_lua_instructions = "count",
  aot_recompute = "boolean", device = "string", compile_all = "boolean", remember_dynamic = "boolean",
}

-- Edit distance, for "did you mean" (keys are short).
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = {[0] = i}
    for j = 1, #b do
      local cost = a:byte(i) == b:byte(j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

-- The known name closest to `name` (nil when none is close), and all of them as a list.
local function closest(name, known)
  local best, best_d, all = nil, math.huge, {}
  for k in pairs(known) do
    all[#all + 1] = k
    local d = distance(name, k)
    if d < best_d then best, best_d = k, d end
  end
  table.sort(all)
  if best_d > math.max(2, #name // 3) then best = nil end
  return best, table.concat(all, ", ")
end
tc._C.closest_name = closest

local config_values = {}
for k, v in pairs(config_defaults) do config_values[k] = v end
local function config_set(_, k, v)
  local want = config_types[k]
  if want == nil then
    local best, all = closest(tostring(k), config_types)
    raise("ValueError", ("tc.config has no setting '%s'%s (settings: %s)"):format(tostring(k),
      best and (" (did you mean '%s'?)"):format(best) or "", all))
  end
  if v == nil then config_values[k] = config_defaults[k] return end
  local t, ok = type(v), false
  if want == "count" then
    if t == "number" then v = math.tointeger(v) or v end
    ok = math.type(v) == "integer" and v >= 0
  else
    ok = want:find(t, 1, true) ~= nil
  end
  if not ok then
    raise("ValueError", ("tc.config.%s must be %s, got %s"):format(k,
      want == "count" and "an integer >= 0" or "a " .. want, t == "number" and tostring(v) or t))
  end
  config_values[k] = v
end
tc.config = setmetatable({}, {__index = config_values, __newindex = config_set, __name = "tc.config",
                              __pairs = function() return next, config_values, nil end})

-- ---- compilation (capture replaces tc.compile under tcrun; here functions run uncompiled) --------
-- The backend and mode names are the backend registry's (backends/registry.cpp): capture's
-- install puts them in tc.compiler._backends ({name = {option names}}) and tc.compiler._modes.
-- Under stock lua5.4 there is no backend, so names are not checked there.
local compile_keys = {fullgraph = "boolean", dynamic = "boolean", backend = true, mode = "string",
                      options = "table", disable = "boolean"}

local function names_of(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return table.concat(out, ", ")
end

-- Checks the backend, mode and backend options that a compile will use (after tc.config's
-- defaults) against the registry's lists.
local function check_compile_names(backend, mode, options)
  local known, modes = tc.compiler._backends, tc.compiler._modes
  if type(backend) ~= "function" and type(backend) ~= "string" then
    raise("ValueError", ("tc.compile(): backend must be a name or a function(gm, example_inputs), got %s"):format(type(backend)))
  end
  if known and type(backend) == "string" and not known[backend] then
    raise("ValueError", ('tc.compile(): unknown backend "%s" (backends: %s, or a function(gm, example_inputs))'):format(backend, names_of(known)))
  end
  -- the cuda backend compiles for a GPU: without one it would run every graph op by op, silently
  -- (compile-only mode, which compiles CUDA code without a GPU, is the exception)
  if known and backend == "cuda" and not tc.cuda.is_available() and not tc.cuda._compile_only() then
    raise("DeviceError", 'tc.compile(): backend "cuda" needs a CUDA GPU, and none is available (no GPU or no driver: tc.cuda.is_available() is false); use backend = "tc", which compiles for the device the tensors are on')
  end
  if modes and mode ~= nil then
    local ok = false
    for _, m in ipairs(modes) do ok = ok or m == mode end
    if not ok then
      raise("ValueError", ('tc.compile(): unknown mode "%s" (modes: %s)'):format(tostring(mode), table.concat(modes, ", ")))
    end
  end
  if options == nil then return end
  if type(backend) == "function" then
    raise("ValueError", "tc.compile(): options = {...} are for named backends; a function backend takes none")
  end
  for k, v in pairs(options) do
    if type(k) ~= "string" then raise("ValueError", ("tc.compile(): option names are strings, got %s"):format(type(k))) end
    local t = type(v)
    if t ~= "boolean" and t ~= "number" and t ~= "string" then
      raise("ValueError", ("tc.compile(): option '%s' must be a boolean, number or string, got %s"):format(k, t))
    end
    if known and known[backend] and not known[backend][k] then
      local opts = names_of(known[backend])
      raise("ValueError", ('tc.compile(): backend "%s" has no option \'%s\' (its options: %s)'):format(backend, k, opts == "" and "none" or opts))
    end
  end
end

local function check_compile_options(opts)
  if opts == nil then return check_compile_names(tc.config.backend or "tc", tc.config.mode) end
  if type(opts) ~= "table" then raise("ValueError", "tc.compile(f, opts): opts must be a table, got " .. type(opts)) end
  for k, v in pairs(opts) do
    local want = compile_keys[k]
    if want == nil then
      local best = closest(tostring(k), compile_keys)
      raise("ValueError", ("tc.compile() got an unexpected option '%s'%s (options: fullgraph, dynamic, backend, mode, options, disable)"):format(
        tostring(k), best and (" (did you mean '%s'?)"):format(best) or ""))
    end
    if want ~= true and type(v) ~= want then
      raise("ValueError", ("tc.compile(): option '%s' must be a %s, got %s"):format(k, want, type(v)))
    end
  end
  check_compile_names(opts.backend or tc.config.backend or "tc", opts.mode or tc.config.mode, opts.options)
end

local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil or (type(f) == "table" and type(f.forward) == "function")
end

local noticed = false
-- tc.compile(f, opts) -> f: the options are checked now; the function runs uncompiled. Where a
-- compiler is installed (tcrun, or a C++ program that calls tc::vm::install_compiler) capture
-- replaces this function; elsewhere (stock lua5.4, a tc::vm::Runtime alone) a one-time notice says
-- why nothing compiles.
function tc.compile(f, opts)
  if not callable(f) then raise("ValueError", "tc.compile(): expected a function or a module, got " .. type(f)) end
  check_compile_options(opts)
  if not noticed then
    noticed = true
    if C.host() == nil then
      io.stderr:write("tc: compilation is not available under stock lua5.4; tc.compile returns functions unchanged (run with tcrun)\n")
    else
      io.stderr:write(("tc: this program (%s) embeds tc without its compiler; tc.compile returns functions unchanged "
        .. "(call tc::vm::install_compiler(runtime) from tc/vm/compiler.h and link tc::tc)\n"):format(C.host()))
    end
  end
  return f
end

-- tc.einsum(equation, a, b, ...) as PyTorch takes it, as well as tc.einsum(equation, {a, b, ...}).
local einsum = tc.einsum
function tc.einsum(equation, ...)
  if select("#", ...) == 1 and not is_tensor((...)) then return einsum(equation, ...) end
  return einsum(equation, {...})
end

-- tc.export(f, args, opts): the whole function as one graph with its weights lifted (tc.aot.lua).
function tc.export(...) return require("tc.aot").export(...) end

-- tc.compiler: the torch.compiler API. With no capture yet every function runs eagerly, so these
-- are exact for an uncompiled runtime: nothing to reset, no graphs, nothing recompiles.
local stances = {default = true, force_eager = true, eager_on_recompile = true, fail_on_recompile = true}
local compiler = {stance = "default", _check_options = check_compile_options}
tc.compiler = compiler
-- The backends tc.compile accepts by name (the registry's list; none under stock lua5.4).
function compiler.list_backends()
  local out = {}
  for k in pairs(compiler._backends or {}) do out[#out + 1] = k end
  table.sort(out)
  return out
end
function compiler.reset() end
function compiler.disable(f)
  if f ~= nil and not callable(f) then raise("ValueError", "tc.compiler.disable(): expected a function, got " .. type(f)) end
  if f == nil then return function(g) return g end end
  return f
end
-- set_stance returns a guard: `local _ <close> = tc.compiler.set_stance("force_eager")` restores
-- the previous stance at the end of the block (torch's `with torch.compiler.set_stance(...)`).
local stance_guard_mt = {__close = function(g) tc.compiler.set_stance(g.prev) end, __name = "tc.compiler.stance_guard"}
function C.stance_guard(prev) return setmetatable({prev = prev}, stance_guard_mt) end
function compiler.set_stance(stance)
  if not stances[stance] then
    raise("ValueError", ('tc.compiler.set_stance(): unknown stance "%s" (default, force_eager, eager_on_recompile, fail_on_recompile)'):format(tostring(stance)))
  end
  local prev = compiler.stance
  compiler.stance = stance
  return C.stance_guard(prev)
end
function compiler.mark_dynamic(x, dim)
  if type(x) == "table" and type(dim) == "string" then return end
  if not is_tensor(x) then raise("ValueError", "tc.compiler.mark_dynamic(): expected a tensor, or a table and a key, got " .. type(x)) end
  for _, d in ipairs(type(dim) == "table" and dim or {dim}) do
    if math.type(d) ~= "integer" or d == 0 or d > x:dim() or d < -x:dim() then
      raise("IndexError", ("tc.compiler.mark_dynamic(): dimension %s out of range for a %d-dim tensor (dims are 1-based)"):format(tostring(d), x:dim()))
    end
  end
end
function compiler.allow_in_graph(fn, meta_fn)
  if type(fn) ~= "function" then raise("ValueError", "tc.compiler.allow_in_graph(): expected a function, got " .. type(fn)) end
  if meta_fn ~= nil and type(meta_fn) ~= "function" then
    raise("ValueError", "tc.compiler.allow_in_graph(): meta_fn must be a function, got " .. type(meta_fn))
  end
  return fn
end
function compiler.stats()
  return {traces = 0, backend_compiles = 0, cache_hits = 0, recompiles = 0, graph_breaks = 0, fallbacks = 0,
          guard_fast_hits = 0, kernels = 0, distinct_kernels = 0, cached_kernels = 0, cached_plans = 0, fallback_nodes = 0,
          tuned_kernels = 0, tuned_cached = 0, trace_ms = 0, backend_compile_ms = 0, lower_ms = 0, codegen_ms = 0,
          compile_ms = 0, tune_ms = 0}
end

local function explain_text(r)
  return table.concat({
    "Graph Count: " .. r.graph_count, "Graph Break Count: " .. r.graph_break_count,
    "Op Count: " .. r.op_count, "Break Reasons:", "Ops per Graph:", "Guards:", "Recompiles:",
    "Compile Times:", "(capture is not available yet: the function ran uncompiled)"}, "\n")
end
-- tc.compiler.explain(f)(args...) -> report, text. Runs f (uncompiled) and reports no graphs.
function compiler.explain(f)
  if not callable(f) then raise("ValueError", "tc.compiler.explain(): expected a function, got " .. type(f)) end
  return function(...)
    f(...)
    local r = {graph_count = 0, graph_break_count = 0, op_count = 0, break_reasons = {},
               ops_per_graph = {}, guards = {}, recompiles = {}, compile_times = {}}
    return r, explain_text(r)
  end
end

-- ---- submodules: tc.nn is require "tc.nn" -------------------------------------------------------
setmetatable(tc, {__index = function(t, k)
  if type(k) ~= "string" or type(package) ~= "table" then return nil end
  if k == "Trainer" or k == "Timer" or k == "TensorBoardLogger" then return require("tc.trainer")[k] end  -- docs/trainer.md
  local name = "tc." .. k
  if package.loaded[name] == nil and package.preload[name] == nil then return nil end
  local m = require(name)
  rawset(t, k, m)
  return m
end})

-- tc.utils.from_torch_state_dict / to_torch_state_dict live in tc.utils_sd; load it on first use
-- (it requires "tc", so it cannot be loaded while tc itself is being opened).
setmetatable(tc.utils, {__index = function(t, k)
  if k == "data" then return require("tc.utils.data") end  -- torch.utils.data (tc.utils.data.lua)
  if k ~= "from_torch_state_dict" and k ~= "to_torch_state_dict" then return nil end
  require("tc.utils_sd").install()
  return rawget(t, k)
end})
