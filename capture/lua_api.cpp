// install(): tc.compile and tc.compiler.* backed by capture, the compiled-function wrappers
// (a Lua trampoline around l_dispatch) and the pointers of the C builtins the tracer models.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "capture_state.h"
#include "ddp_split.h"
#include "table_snapshot.h"
#include "lua_binding.h"
#include "tc/capture.h"
#include "tc/config.h"
#include "tracer.h"

namespace tc::capture {

std::string report_text(const Report& r);
void push_report(lua_State* L, const Report& r);

namespace {

constexpr const char* kCompiledMeta = "tc.CompiledFunction";

// The Lua side: option checks, modules, explain. Runs as a tc chunk (errors point at the user).
const char* const kLuaSide = R"LUA(
local tc, prim = ...
local raise, is_tensor = tc._C.raise, tc._C.is_tensor
local config = tc.config

local check_options = tc.compiler._check_options  -- tc._api.lua: the one checker of opts
local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and mt.__call ~= nil
end

-- The user's line that called into tc ("model.lua:12"), for names in warnings and reports.
local function user_line()
  for level = 3, 30 do
    local info = debug.getinfo(level, "Sl")
    if not info then break end
    if info.what ~= "C" and info.source:sub(1, 5) ~= "@[tc]" then
      return info.short_src .. ":" .. info.currentline
    end
  end
  return ""
end

-- The code a module's call runs (its forward, else its __call), which keys its code cache.
local function module_code(m)
  local ok, fwd = pcall(function() return m.forward end)
  if ok and type(fwd) == "function" then return fwd end
  return getmetatable(m).__call
end

local function compile(f, opts)
  local fullgraph = opts.fullgraph
  if fullgraph == nil then fullgraph = config.fullgraph == true end
  local backend = opts.backend or config.backend or "tc"
  local dynamic = opts.dynamic
  if dynamic == nil then dynamic = config.dynamic end
  local where = user_line()
  local mode = opts.mode or config.mode
  if type(f) ~= "function" then
    -- a module (or any callable table): compile its call, hooks included; fields read through
    local m = f
    local code = module_code(m)
    local mt = getmetatable(m)
    local class = type(mt) == "table" and rawget(mt, "__name") or "module"
    local info = type(code) == "function" and debug.getinfo(code, "S")
    local name = ("%s (forward <%s:%d>, tc.compile at %s)"):format(tostring(class),
      info and info.short_src or "?", info and info.linedefined or 0, where)
    local cf = prim.compile(function(...) return m(...) end, backend, fullgraph, dynamic,
                            mode, code, name, where, opts.options)
    -- the wrapper stands for the module: its methods run on the module (c:parameters(), c:eval()),
    -- its fields are the module's (reads and writes)
    local wrapper, bound = {_orig_mod = m}, setmetatable({}, {__mode = "k"})  -- torch's OptimizedModule._orig_mod
    local function index(_, k)
      local v = m[k]
      if type(v) ~= "function" then return v end
      bound[v] = bound[v] or function(self, ...)
        if rawequal(self, wrapper) then self = m end
        return v(self, ...)
      end
      return bound[v]
    end
    return setmetatable(wrapper, {__call = function(_, ...) return cf(...) end, __index = index, __newindex = m,
                                  __name = "CompiledModule", __tostring = function() return "Compiled(" .. tostring(m) .. ")" end})
  end
  return prim.compile(f, backend, fullgraph, dynamic, mode, nil, nil, where, opts.options)
end

function tc.compile(f, opts)
  if not callable(f) then raise("ValueError", "tc.compile(): expected a function or a module, got " .. type(f)) end
  check_options(opts)
  opts = opts or {}
  if opts.disable or config.eager or prim.is_disabled(f) then return f end
  if type(f) == "function" and debug.getinfo(f, "S").what == "C" then return f end  -- nothing to trace
  return compile(f, opts)
end

local compiler = tc.compiler
local stances = {default = true, force_eager = true, eager_on_recompile = true, fail_on_recompile = true}
function compiler.reset() prim.reset() end
function compiler.disable(f)
  if f == nil then return function(g) return compiler.disable(g) end end
  if not callable(f) then raise("ValueError", "tc.compiler.disable(): expected a function, got " .. type(f)) end
  prim.disable(f)
  return f
end
function compiler.set_stance(stance)
  if not stances[stance] then
    raise("ValueError", ('tc.compiler.set_stance(): unknown stance "%s" (default, force_eager, eager_on_recompile, fail_on_recompile)'):format(tostring(stance)))
  end
  local prev = compiler.stance
  compiler.stance = stance
  prim.set_stance(stance)
  return tc._C.stance_guard(prev)  -- `local _ <close> = ...` restores prev (tc._api.lua)
end
-- 1-based dims of x (negative from the end) as an array; IndexError names `what` for one out of range
local function dims_of(x, dim, what)
  local dims = {}
  for _, d in ipairs(type(dim) == "table" and dim or {dim}) do
    if math.type(d) ~= "integer" or d == 0 or d > x:dim() or d < -x:dim() then
      raise("IndexError", ("tc.compiler.%s(): dimension %s out of range for a %d-dim tensor (dims are 1-based)"):format(what, tostring(d), x:dim()))
    end
    dims[#dims + 1] = d < 0 and x:dim() + 1 + d or d
  end
  return dims
end
-- tc.compiler.mark_dynamic(x, dim | {dims} [, {min =, max =}]): those dims take any size (in
-- [min, max] when given: a size outside misses the guard, a recompile); mark_dynamic(t, "key"): the
-- number t.key is not specialized.
function compiler.mark_dynamic(x, dim, range)
  if type(x) == "table" and type(dim) == "string" then return prim.mark_dynamic(x, {dim}) end
  if not is_tensor(x) then raise("ValueError", "tc.compiler.mark_dynamic(): expected a tensor, or a table and a key, got " .. type(x)) end
  local r
  if range ~= nil then
    if type(range) ~= "table" then raise("ValueError", "tc.compiler.mark_dynamic(x, dim, range): range must be {min =, max =}") end
    for k in pairs(range) do
      if k ~= "min" and k ~= "max" then raise("ValueError", ("tc.compiler.mark_dynamic(): unknown range key '%s' (min, max)"):format(tostring(k))) end
    end
    local lo, hi = range.min or 2, range.max or math.maxinteger
    if math.type(lo) ~= "integer" or math.type(hi) ~= "integer" or lo < 2 or hi < lo then
      raise("ValueError", ("tc.compiler.mark_dynamic(): the range needs integers 2 <= min <= max, got min = %s, max = %s"):format(
        tostring(range.min), tostring(range.max)))
    end
    r = {lo, hi}
    for _, d in ipairs(dims_of(x, dim, "mark_dynamic")) do
      local n = x:size(d)
      if n < lo or n > hi then
        raise("ValueError", ("tc.compiler.mark_dynamic(): dim %d of the tensor is %d, outside its range [%d, %s]"):format(
          d, n, lo, hi == math.maxinteger and "inf" or tostring(hi)))
      end
    end
  end
  prim.mark_dynamic(x, dims_of(x, dim, "mark_dynamic"), r)
end
-- tc.compiler.mark_static(x, dim | {dims}): those dims of x stay specialized (a guard on their size)
-- even where a recompile, dynamic = true or an earlier run would make them dynamic.
function compiler.mark_static(x, dim)
  if not is_tensor(x) then raise("ValueError", "tc.compiler.mark_static(): expected a tensor, got " .. type(x)) end
  prim.mark_static(x, dims_of(x, dim, "mark_static"))
end
function compiler.allow_in_graph(fn, meta_fn)
  if type(fn) ~= "function" then raise("ValueError", "tc.compiler.allow_in_graph(): expected a function, got " .. type(fn)) end
  if meta_fn ~= nil and type(meta_fn) ~= "function" then
    raise("ValueError", "tc.compiler.allow_in_graph(): meta_fn must be a function, got " .. type(meta_fn))
  end
  prim.allow_in_graph(fn, meta_fn)
  return fn
end
function compiler.stats() return prim.stats() end
-- benchmarks and tests: the guards' fast path on (default) or off (every hit takes the full check)
function compiler._set_guard_fast_path(on) prim.set_guard_fast_path(on and true or false) end
-- tc.compiler.explain(f [, opts])(args...): opts as tc.compile's (backend: tc.config.backend)
function compiler.explain(f, opts)
  if not callable(f) then raise("ValueError", "tc.compiler.explain(): expected a function, got " .. type(f)) end
  check_options(opts)
  opts = opts or {}
  return function(...)
    prim.explain_begin()
    local ok, err = pcall(compile(f, opts), ...)
    local report, text = prim.explain_end()
    if not ok then error(err, 0) end
    return report, text
  end
end
)LUA";

// ---- wrappers ---------------------------------------------------------------------------------
int compiled_gc(lua_State* L) {
  static_cast<CompiledFn*>(lua_touserdata(L, 1))->~CompiledFn();
  return 0;
}

void registry_weak_table(lua_State* L, const char* name) {
  lua_newtable(L);
  lua_newtable(L);
  lua_pushstring(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, name);
}

int p_compile(lua_State* L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  auto cfg = std::make_shared<CompileConfig>();
  if (lua_type(L, 2) == LUA_TFUNCTION) {
    lua_pushvalue(L, 2);
    cfg->backend_fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  } else {
    cfg->backend = luaL_optstring(L, 2, "tc");
  }
  cfg->fullgraph = lua_toboolean(L, 3);
  cfg->dynamic = lua_isnil(L, 4) ? -1 : lua_toboolean(L, 4) ? 1 : 0;
  cfg->mode = luaL_optstring(L, 5, "default");
  if (lua_type(L, 6) == LUA_TFUNCTION && !lua_iscfunction(L, 6)) cfg->code_key = "/" + dump_key(L, 6);
  cfg->where = luaL_optstring(L, 8, "");
  std::vector<std::pair<std::string, std::string>> shown;  // options as text, for backend_key
  if (lua_istable(L, 9)) {  // the backend's options (checked by tc._api.lua's check_options)
    lua_pushnil(L);
    while (lua_next(L, 9)) {
      cfg->options.emplace_back(lua_tostring(L, -2), lua::to_value(L, -1, "option"));
      shown.emplace_back(lua_tostring(L, -2), luaL_tolstring(L, -1, nullptr));
      lua_pop(L, 2);
    }
    std::ranges::sort(cfg->options, {}, [](const auto& kv) { return kv.first; });
    std::ranges::sort(shown);
  }
  if (cfg->backend_fn_ref != LUA_NOREF) {
    // named by its definition site in reports; told apart by identity
    lua_Debug ar;
    lua_pushvalue(L, 2);
    lua_getinfo(L, ">S", &ar);
    char buf[LUA_IDSIZE + 64];
    std::snprintf(buf, sizeof buf, "function <%s:%d>#%p", ar.short_src, ar.linedefined, lua_topointer(L, 2));
    cfg->backend_key = buf;
  } else {
    cfg->backend_key = cfg->backend;
  }
  if (cfg->mode != "default") cfg->backend_key += " mode=" + cfg->mode;
  for (const auto& [k, v] : shown) cfg->backend_key += " " + k + "=" + v;
  push_compiled(L, 1, cfg, luaL_optstring(L, 7, ""));
  return 1;
}

int p_is_disabled(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.disabled");
  lua_pushvalue(L, 1);
  lua_pushboolean(L, lua_rawget(L, -2) != LUA_TNIL);
  return 1;
}

int p_disable(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.disabled");
  lua_pushvalue(L, 1);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  return 0;
}

// prim.allow_in_graph(fn, meta_fn): registry "tc.capture.allowed"[fn] = {meta = meta_fn, id = n}
// and "tc.capture.allowed_fns"[n] = fn (both strong: a registration lasts as long as the state,
// which keeps the function alive for every graph that calls it).
int p_allow_in_graph(lua_State* L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 2);
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.allowed");
  lua_pushvalue(L, 1);
  if (lua_rawget(L, 3) == LUA_TTABLE) {  // registered again: new meta function
    lua_pushvalue(L, 2);
    lua_setfield(L, -2, "meta");
  } else {
    lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.allowed_fns");
    const lua_Integer id = lua_Integer(lua_rawlen(L, -1)) + 1;
    lua_pushvalue(L, 1);
    lua_rawseti(L, -2, id);
    lua_createtable(L, 0, 2);
    lua_pushvalue(L, 2);
    lua_setfield(L, -2, "meta");
    lua_pushinteger(L, id);
    lua_setfield(L, -2, "id");
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, 3);
  }
  // entries traced before the registration inlined the function or broke at it
  State& st = state();
  st.caches.clear();
  st.generation++;
  return 0;
}

int p_reset(lua_State*) {
  State& st = state();
  st.caches.clear();
  st.generation++;
  st.stats = Stats{};
  st.report = Report{};
  st.stance = "default";
  return 0;
}

int p_set_stance(lua_State* L) {
  state().stance = luaL_checkstring(L, 1);
  return 0;
}

// prim.mark_dynamic(x, dims) / prim.mark_static(x, dims): registry table `name` (weak keys) x ->
// {dim = true}, read by the tracer (tracer_values.cpp).
int mark_dims(lua_State* L, const char* name) {
  lua_settop(L, 3);  // 3: the range {min, max}, or nil
  lua_getfield(L, LUA_REGISTRYINDEX, name);
  lua_pushvalue(L, 1);
  if (lua_rawget(L, -2) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, 1);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  for (lua_Integer i = 1; i <= lua_Integer(lua_rawlen(L, 2)); i++) {
    lua_rawgeti(L, 2, i);
    if (lua_istable(L, 3)) lua_pushvalue(L, 3);  // {min, max} (mark_dynamic's range)
    else lua_pushboolean(L, 1);
    lua_rawset(L, -3);
  }
  return 0;
}
int p_mark_dynamic(lua_State* L) { return mark_dims(L, "tc.capture.marked"); }
int p_mark_static(lua_State* L) { return mark_dims(L, "tc.capture.static"); }

int p_set_guard_fast_path(lua_State* L) {
  set_snapshots_enabled(lua_toboolean(L, 1));
  return 0;
}

// tc.compiler.stats(): the counters, the backends' reports summed (kernels, fallback_nodes ...)
// and the time spent tracing and in the backends.
int p_stats(lua_State* L) {
  const Stats& s = state().stats;
  lua_createtable(L, 0, 20);
  const std::pair<const char*, int64_t> fields[] = {
      {"traces", s.traces},
      {"guard_fast_hits", s.guard_fast_hits},
      {"max_guards", s.max_guards},
      {"pure_lua_skips", s.pure_lua_skips},
      {"pure_lua_calls", s.pure_lua_calls},
      {"backend_compiles", s.backend_compiles},
      {"cache_hits", s.cache_hits},
      {"recompiles", s.recompiles},
      {"graph_breaks", s.graph_breaks},
      {"fallbacks", s.fallbacks},
      {"training_entries", s.training_entries},
      {"training_eager", s.training_eager},
      {"backward_compiles", s.backward_compiles},
      {"saved_tensors", s.saved_tensors},
      {"ddp_split_graphs", s.ddp_split_graphs},
      {"ddp_subgraphs", s.ddp_subgraphs},
      {"kernels", s.backend.kernels},
      {"distinct_kernels", s.backend.distinct_kernels},
      {"cached_kernels", s.backend.cached_kernels},
      {"cached_plans", s.backend.cached_plans},
      {"fallback_nodes", s.backend.fallback_nodes},
      {"tuned_kernels", s.backend.tuned_kernels},
      {"tuned_cached", s.backend.tuned_cached}};
  for (auto& [k, v] : fields) {
    lua_pushinteger(L, v);
    lua_setfield(L, -2, k);
  }
  const std::pair<const char*, double> times[] = {{"trace_ms", s.trace_ms},
                                                  {"backend_compile_ms", s.backend_ms},
                                                  {"lower_ms", s.backend.lower_ms},
                                                  {"codegen_ms", s.backend.codegen_ms},
                                                  {"compile_ms", s.backend.compile_ms},
                                                  {"tune_ms", s.backend.tune_ms}};
  for (auto& [k, v] : times) {
    lua_pushnumber(L, v);
    lua_setfield(L, -2, k);
  }
  return 1;
}

struct Saved {
  std::unordered_map<std::string, std::shared_ptr<CodeCache>>
      caches;  // shared: a pending break keeps its cache
  Report report;
  Stats stats;
  bool active = false;
};
Saved& saved() {
  static Saved s;
  return s;
}

int p_explain_begin(lua_State* L) {
  State& st = state();
  Saved& sv = saved();
  if (sv.active) return luaL_error(L, "tc.compiler.explain cannot be nested");
  sv.active = true;
  sv.caches = std::move(st.caches);
  sv.report = std::move(st.report);
  sv.stats = st.stats;
  st.caches.clear();
  st.report = Report{};
  st.generation++;
  return 0;
}

int p_explain_end(lua_State* L) {
  State& st = state();
  Saved& sv = saved();
  Report r = std::move(st.report);
  r.caches = cache_records();
  st.caches = std::move(sv.caches);
  st.report = std::move(sv.report);
  st.stats = sv.stats;
  st.generation++;
  sv.active = false;
  push_report(L, r);
  std::string text = report_text(r);
  lua_pushlstring(L, text.data(), text.size());
  return 2;
}

void collect_builtins(lua_State* L) {
  const int top0 = lua_gettop(L);
  Known& k = known();
  auto add = [&](const char* name) {
    if (lua_iscfunction(L, -1)) k.builtins[lua_tocfunction(L, -1)] = name;
  };
  const char* base[] = {"type",   "select",   "ipairs",   "pairs",        "next",         "rawget",
                        "rawset", "rawequal", "rawlen",   "getmetatable", "setmetatable", "assert",
                        "error",  "tostring", "tonumber", "pcall"};
  for (const char* n : base) {
    lua_getglobal(L, n);
    add(n);
    lua_pop(L, 1);
  }
  for (const char* lib : {"math", "string", "table"}) {
    if (lua_getglobal(L, lib) != LUA_TTABLE) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
      if (lua_type(L, -2) == LUA_TSTRING && lua_iscfunction(L, -1)) {
        std::string name = std::string(lib) + "." + lua_tostring(L, -2);
        static std::vector<std::unique_ptr<std::string>> names;
        names.push_back(std::make_unique<std::string>(name));
        k.builtins[lua_tocfunction(L, -1)] = *names.back();
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  // C functions that call one of their arguments (compile-all routes it through the compiler)
  const std::pair<const char*, int> callers[] = {{"pcall", 1},       {"xpcall", 1},
                                                 {"table.sort", 2},  {"string.gsub", 3},
                                                 {"coroutine.create", 1}, {"coroutine.wrap", 1}};
  for (auto& [path, arg] : callers) {
    lua_getglobal(L, "_G");
    for (const char *s = path, *dot; s; s = dot ? dot + 1 : nullptr) {
      dot = std::strchr(s, '.');
      lua_pushlstring(L, s, dot ? size_t(dot - s) : std::strlen(s));
      lua_rawget(L, -2);
      lua_remove(L, -2);
      if (!lua_istable(L, -1)) break;
    }
    if (lua_iscfunction(L, -1)) k.calls_arg[lua_tocfunction(L, -1)] = arg;
    if (lua_iscfunction(L, -1) && std::strstr(path, "pcall"))
      k.calls_value[lua_tocfunction(L, -1)] = path[0] == 'x' ? 2 : 1;
    lua_pop(L, 1);
  }
  lua_getglobal(L, "tostring");
  k.tostring = lua_tocfunction(L, -1);
  lua_getglobal(L, "print");
  k.print = lua_tocfunction(L, -1);
  lua_pop(L, 2);
  // unpack is table.unpack; the ipairs iterator
  lua_getglobal(L, "ipairs");
  lua_newtable(L);
  lua_call(L, 1, 1);
  k.builtins[lua_tocfunction(L, -1)] = "ipairs_aux";
  lua_setfield(L, LUA_REGISTRYINDEX, "tc.capture.ipairs_aux");
  // tc: ops, trampolines, tensor C methods
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.module");
  lua_getfield(L, -1, "is_tensor");
  add("tc.is_tensor");
  lua_pop(L, 1);
  lua_getfield(L, -1, "is_grad_enabled");
  add("tc.is_grad_enabled");
  lua_pop(L, 1);
  lua_getfield(L, -1, "set_grad_enabled");
  add("tc.set_grad_enabled");
  lua_pop(L, 1);
  lua_getfield(L, -1, "_C");
  lua_getfield(L, -1, "is_dtype");
  add("tc._C.is_dtype");
  lua_getfield(L, -2, "is_tensor");
  add("tc.is_tensor");
  lua_pop(L, 3);
  lua_getfield(L, -1, "Tensor");
  for (const char* m : {"size", "stride", "dim", "numel", "nelement", "is_contiguous",
                        "element_size", "is_floating_point", "item", "tolist"}) {
    lua_getfield(L, -1, m);
    static std::vector<std::unique_ptr<std::string>> names;
    names.push_back(std::make_unique<std::string>(std::string("Tensor.") + m));
    if (lua::trampoline_target(L, -1))
      lua_pop(L, 1);  // a Lua function of tc: traced through
    else if (lua_iscfunction(L, -1))
      k.builtins[lua_tocfunction(L, -1)] = *names.back();
    lua_pop(L, 1);
  }
  lua_getfield(L, -1, "backward");
  if (lua_iscfunction(L, -1)) k.backwards[lua_tocfunction(L, -1)] = "x:backward()";
  lua_pop(L, 2);
  lua_pushstring(L, "autograd");
  if (lua_rawget(L, -2) == LUA_TTABLE && lua_getfield(L, -1, "backward") == LUA_TFUNCTION &&
      lua_iscfunction(L, -1))
    k.backwards[lua_tocfunction(L, -1)] = "tc.autograd.backward()";
  lua_settop(L, top0);
  luaL_getmetatable(L, lua::kSizeMeta);
  if (lua_istable(L, -1) && lua_getfield(L, -1, "__index") == LUA_TTABLE) {
    lua_getfield(L, -1, "numel");
    add("tc.Size.numel");
    lua_pop(L, 1);
  }
  lua_settop(L, top0);
}

}  // namespace

static thread_local lua_State* t_running = nullptr;
lua_State* running_state() { return t_running; }
RunningState::RunningState(lua_State* L) : prev(t_running) { t_running = L; }
RunningState::~RunningState() { t_running = prev; }

std::string error_text(lua_State* L, int idx) {
  if (const char* s = lua_tostring(L, idx)) return s;
  if (lua_type(L, idx) == LUA_TTABLE) {
    lua_pushstring(L, "message");
    lua_rawget(L, idx < 0 ? idx - 1 : idx);
    std::string m = lua_tostring(L, -1) ? lua_tostring(L, -1) : "";
    lua_pop(L, 1);
    if (!m.empty()) return m;
  }
  return std::string("(error object is a ") + luaL_typename(L, idx) + " value)";
}

std::vector<Tensor> run_external(int id, const std::string& name, const Stack& expect,
                                 const Stack& args) {
  lua_State* L = running_state();
  TC_CHECK(L != nullptr, CompileError,
           "%s (allow_in_graph): a graph calling it ran outside of a compiled call", name.c_str());
  const int top = lua_gettop(L);
  TC_CHECK(lua_checkstack(L, int(args.size()) + 8), CompileError, "%s: Lua stack overflow",
           name.c_str());
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.allowed_fns");
  lua_rawgeti(L, -1, id);
  lua_remove(L, -2);
  for (const Value& v : args) lua::push_value(L, v);
  if (lua_pcall(L, int(args.size()), LUA_MULTRET, 0) != LUA_OK) {
    std::string msg = error_text(L, -1);
    lua_settop(L, top);
    TC_FAIL(ValueError, "%s", msg.c_str());
  }
  const int n = lua_gettop(L) - top;
  std::vector<Tensor> out;
  std::string bad;
  for (int i = 0; i < n && bad.empty(); i++) {
    const Tensor* t = lua::to_tensor(L, top + 1 + i);
    if (!t) {
      bad = std::string("result ") + std::to_string(i + 1) + " is a " +
            luaL_typename(L, top + 1 + i) + ", not a tensor";
    } else if (i < int(expect.size()) && (t->dtype() != expect[i].tensor().dtype() ||
                                          t->dim() != expect[i].tensor().dim())) {
      bad = "result " + std::to_string(i + 1) + " is " + t->meta_string() +
            ", its meta function said " + expect[i].tensor().meta_string();
    } else {
      out.push_back(*t);
    }
  }
  lua_settop(L, top);
  if (bad.empty() && n != int(expect.size()))
    bad = std::to_string(n) + " results, its meta function said " + std::to_string(expect.size());
  TC_CHECK(bad.empty(), ValueError, "%s (allow_in_graph): %s", name.c_str(), bad.c_str());
  return out;
}

void push_compiled(lua_State* L, int fn_idx, std::shared_ptr<CompileConfig> cfg, std::string name) {
  fn_idx = lua_absindex(L, fn_idx);
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.factory");
  void* mem = lua_newuserdatauv(L, sizeof(CompiledFn), 1);
  new (mem) CompiledFn{std::move(cfg), nullptr, 0, std::string(), std::move(name)};
  luaL_setmetatable(L, kCompiledMeta);
  lua_pushvalue(L, fn_idx);
  lua_setiuservalue(L, -2, 1);
  lua_call(L, 1, 1);  // factory(fs) -> wrapper
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.wrappers");
  lua_pushvalue(L, -2);
  lua_pushvalue(L, fn_idx);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void push_wrapper(lua_State* L, int fn_idx, const std::shared_ptr<CompileConfig>& cfg) {
  fn_idx = lua_absindex(L, fn_idx);
  // one wrapper per function and compile configuration (a function called at a break of a
  // default-mode and of a reduce-overhead compile runs with each one's backend and mode), and
  // per module code under tc.compile(module) (its own caches)
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.regional");
  const std::string key = cfg->code_key + "|" + cfg->backend_key + (cfg->fullgraph ? "|fullgraph" : "") +
                          "|dynamic=" + std::to_string(cfg->dynamic);
  if (lua_getfield(L, -1, key.c_str()) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_newtable(L);
    lua_pushstring(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, key.c_str());
  }
  lua_remove(L, -2);
  lua_pushvalue(L, fn_idx);
  if (lua_rawget(L, -2) == LUA_TFUNCTION) {
    lua_remove(L, -2);
    return;
  }
  lua_pop(L, 1);
  // functions that are themselves wrappers or disabled are called as they are
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.wrappers");
  lua_pushvalue(L, fn_idx);
  bool wrapper = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.capture.disabled");
  lua_pushvalue(L, fn_idx);
  bool disabled = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  if (wrapper || disabled) {
    lua_pop(L, 1);
    lua_pushvalue(L, fn_idx);
    return;
  }
  push_compiled(L, fn_idx, cfg);
  lua_pushvalue(L, fn_idx);
  lua_pushvalue(L, -2);
  lua_rawset(L, -4);
  lua_remove(L, -2);
}

// The log names (TC_LOGS, --log, tc.config.log): capture prints the first six (skips: functions
// given up for having no tensor work; aot_graphs: the forward and backward graphs of compiled
// training), code generators output_code and perf_hints; `all` turns every one on.
constexpr const char* kLogs[] = {"graph_breaks", "recompiles",  "guards",     "graph_code", "skips",
                                 "aot_graphs",   "output_code", "perf_hints", "all"};

std::string check_logs(const std::string& list) {
  std::string names;
  for (const char* n : kLogs) names += std::string(names.empty() ? "" : ", ") + n;
  size_t at = 0;
  while (at <= list.size()) {
    size_t end = list.find_first_of(", ", at);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(at, end - at);
    bool known = name.empty();
    for (const char* n : kLogs) known = known || name == n;
    if (!known) return "unknown log '" + name + "' (logs: " + names + ")";
    at = end + 1;
  }
  return "";
}

bool log_enabled(lua_State* L, const char* topic) {
  const int d = debug_level();
  if (d >= 1 && (!std::strcmp(topic, "graph_breaks") || !std::strcmp(topic, "recompiles")))
    return true;
  if (d >= 2 && !std::strcmp(topic, "graph_code")) return true;
  if (d >= 4 && !std::strcmp(topic, "guards")) return true;
  lua_getfield(L, LUA_REGISTRYINDEX, "tc.module");
  bool on = false;
  if (lua_istable(L, -1) && lua_getfield(L, -1, "config") == LUA_TTABLE) {
    lua_getfield(L, -1, "log");
    if (const char* s = lua_tostring(L, -1)) {
      static std::string checked;  // the last setting found valid
      if (checked != s) {
        const std::string err = check_logs(s);
        lua_pop(L, 3);
        TC_CHECK(err.empty(), ValueError, "tc.config.log: %s", err.c_str());
        checked = s;
        return log_enabled(L, topic);
      }
      on = std::strstr(s, topic) || std::strstr(s, "all");
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
  return on;
}

void note_backend_report(lua_State* L, const std::string& function, const CompileReport& r) {
  CompileReport sum = r;
  sum.perf_hints.clear();
  state().stats.backend.add(sum);
  if (!r.perf_hints.empty() && log_enabled(L, "perf_hints"))
    for (const std::string& h : r.perf_hints)
      std::fprintf(stderr, "[tc perf_hints] %s: %s\n", function.c_str(), h.c_str());
}

void raise_graph_break(lua_State* L, const GraphBreak& b) {
  const BreakInfo& info = break_info(b.code);
  std::string msg = "graph break under fullgraph=true: " + b.reason();
  const StackFrame* site = b.stack.empty() ? nullptr : &b.stack.back();
  if (site && !site->source_line.empty()) msg += "\n  " + site->source_line;
  msg += "\n  Hint: " + std::string(info.hint);
  if (b.stack.size() > 1) {
    msg += "\n  User stack:";
    for (const StackFrame& f : b.stack)
      msg += "\n    " + f.file + ":" + std::to_string(f.line) + " in " + f.function;
  }
  lua::push_error(L, "GraphBreakError", msg.c_str(), 1);
  lua_pushstring(L, info.code);
  lua_setfield(L, -2, "code");
  lua_pushstring(L, b.reason().c_str());
  lua_setfield(L, -2, "reason");
  lua_pushstring(L, info.hint);
  lua_setfield(L, -2, "hint");
  if (site) {
    lua_pushstring(L, site->file.c_str());
    lua_setfield(L, -2, "file");
    lua_pushinteger(L, site->line);
    lua_setfield(L, -2, "line");
    lua_pushstring(L, site->source_line.c_str());
    lua_setfield(L, -2, "source_line");
  }
}

void set_compile_all(lua_State*, bool on) { state().compile_all = on; }

void install(lua_State* L, GraphCompiler compiler) {
  if (const char* logs = std::getenv("TC_LOGS")) {
    const std::string err = check_logs(logs);
    TC_CHECK(err.empty(), ValueError, "TC_LOGS: %s", err.c_str());
  }
  state().compiler = std::move(compiler);
  // a new state may reuse the address of a closed one: drop caches keyed by that address
  const std::string prefix = state_prefix(L);
  std::erase_if(state().caches, [&](const auto& kv) { return kv.first.rfind(prefix, 0) == 0; });
  state().generation++;
  const int top = lua_gettop(L);
  lua_getglobal(L, "require");
  lua_pushstring(L, "tc");
  lua_call(L, 1, 1);
  const int tc_idx = lua_gettop(L);
  for (const char* n : {"tc.capture.resumes", "tc.capture.wrappers", "tc.capture.disabled",
                        "tc.capture.marked", "tc.capture.static", "tc.capture.regional"})
    registry_weak_table(L, n);
  for (const char* n : {"tc.capture.sites"}) registry_weak_table(L, n);
  for (const char* n : {"tc.capture.allowed", "tc.capture.allowed_fns"}) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, n) != LUA_TTABLE) {
      lua_newtable(L);
      lua_setfield(L, LUA_REGISTRYINDEX, n);
    }
    lua_pop(L, 1);
  }
  if (luaL_newmetatable(L, kCompiledMeta)) {
    lua_pushcfunction(L, compiled_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  // the wrapper factory, ident and pass
  const char* helpers = R"LUA(
local dispatch, after_call = ...
local function pass(f, ...) return f(...) end
local function factory(fs) return function(...) return pass(dispatch(fs, ...)) end end

local function ident(...) return ... end
return factory, ident, pass
)LUA";
  if (luaL_loadbuffer(L, helpers, std::strlen(helpers), "@[tc]/compile.lua") != LUA_OK)
    lua_error(L);
  lua_pushcfunction(L, l_dispatch);
  lua_pushcfunction(L, l_after_call);
  known().dispatch = l_dispatch;
  lua_call(L, 2, 3);
  lua_setfield(L, LUA_REGISTRYINDEX, "tc.capture.pass");
  lua_setfield(L, LUA_REGISTRYINDEX, "tc.capture.ident");
  lua_setfield(L, LUA_REGISTRYINDEX, "tc.capture.factory");
  collect_builtins(L);
  lua_settop(L, tc_idx);
  // tc.compile / tc.compiler
  if (luaL_loadbuffer(L, kLuaSide, std::strlen(kLuaSide), "@[tc]/compile.lua") != LUA_OK)
    lua_error(L);
  lua_pushvalue(L, tc_idx);
  const luaL_Reg prims[] = {
      {"compile", p_compile}, {"is_disabled", p_is_disabled},     {"disable", p_disable},
      {"reset", p_reset},     {"set_stance", p_set_stance},       {"mark_dynamic", p_mark_dynamic},
      {"mark_static", p_mark_static},
      {"stats", p_stats},     {"explain_begin", p_explain_begin}, {"explain_end", p_explain_end},
      {"allow_in_graph", p_allow_in_graph}, {"set_guard_fast_path", p_set_guard_fast_path},
      {nullptr, nullptr}};
  luaL_newlib(L, prims);
  lua_call(L, 2, 0);
  // the registry's names, for tc._api.lua's check of tc.compile's options
  lua_getfield(L, tc_idx, "compiler");
  lua_createtable(L, 0, int(state().compiler.backends.size()));
  for (const auto& [name, options] : state().compiler.backends) {
    lua_createtable(L, 0, int(options.size()));
    for (const std::string& o : options) {
      lua_pushboolean(L, 1);
      lua_setfield(L, -2, o.c_str());
    }
    lua_setfield(L, -2, name.c_str());
  }
  lua_setfield(L, -2, "_backends");
  lua_createtable(L, int(state().compiler.modes.size()), 0);
  for (size_t i = 0; i < state().compiler.modes.size(); i++) {
    lua_pushstring(L, state().compiler.modes[i].c_str());
    lua_rawseti(L, -2, lua_Integer(i) + 1);
  }
  lua_setfield(L, -2, "_modes");
  lua_pushcfunction(L, l_ddp_mark_parameters);
  lua_setfield(L, -2, "_ddp_mark_parameters");
  lua_settop(L, top);
}

}  // namespace tc::capture
