// tc_open_library: builds the `tc` table (dtypes, tc.Size, the tensor type, one function per op,
// utilities), runs tc's embedded Lua parts (modules named tc._*) and registers the other embedded
// modules (tc.nn, tc.optim ...) in package.preload.
#include <chrono>
#include <cstdio>
#include <cstring>

#include "lua_binding.h"
#include "tc/autograd.h"
#include "tc/config.h"
#include "tc/parallel.h"
#include "tc/random.h"

namespace tc::lua {
void open_safetensors(lua_State* L);  // lua_safetensors.cpp: tc.save, tc.load
void open_cuda(lua_State* L);         // lua_cuda.cpp: tc.cuda
namespace {

struct EmbeddedModule {
  const char* name;
  const char* source;
};
const EmbeddedModule kModules[] = {
#include "embedded_lua.inc"
};

constexpr const char* kModuleKey = "tc.module";

// ---- embedded Lua ------------------------------------------------------------------------------
int load_module(lua_State* L, const EmbeddedModule& m) {
  char chunkname[256];
  std::snprintf(chunkname, sizeof chunkname, "@[tc]/%s.lua", m.name);
  return luaL_loadbuffer(L, m.source, std::strlen(m.source), chunkname);
}

// package.preload loader: upvalue 1 is the index into kModules.
int preload_loader(lua_State* L) {
  const EmbeddedModule& m = kModules[lua_tointeger(L, lua_upvalueindex(1))];
  if (load_module(L, m) != LUA_OK) return lua_error(L);
  lua_pushstring(L, m.name);
  lua_call(L, 1, 1);
  return 1;
}

// ---- dtypes and sizes --------------------------------------------------------------------------
int dtype_tostring(lua_State* L) {
  lua_getfield(L, 1, "name");
  lua_pushfstring(L, "tc.%s", lua_tostring(L, -1));
  return 1;
}

int size_tostring(lua_State* L) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '(');
  lua_Integer n = luaL_len(L, 1);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    if (i > 1) luaL_addstring(&b, ", ");
    luaL_addvalue(&b);
  }
  if (n == 1) luaL_addchar(&b, ',');
  luaL_addchar(&b, ')');
  luaL_pushresult(&b);
  return 1;
}

int size_eq(lua_State* L) {
  if (lua_type(L, 1) != LUA_TTABLE || lua_type(L, 2) != LUA_TTABLE) return lua_pushboolean(L, 0), 1;
  lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
  bool eq = n == (lua_Integer)lua_rawlen(L, 2);
  for (lua_Integer i = 1; eq && i <= n; i++) {
    lua_rawgeti(L, 1, i);
    lua_rawgeti(L, 2, i);
    eq = lua_rawequal(L, -1, -2);
    lua_pop(L, 2);
  }
  lua_pushboolean(L, eq);
  return 1;
}

int size_numel(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 1), p = 1;
  for (lua_Integer i = 1; i <= n; i++) {
    lua_rawgeti(L, 1, i);
    p *= lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  lua_pushinteger(L, p);
  return 1;
}

// tc.Size({2, 3}) or tc.Size(2, 3)
int l_size(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    Value v = lua_gettop(L) == 1 ? to_value(L, 1, "tc.Size") : Value(IntList{});
    if (lua_gettop(L) != 1) {
      IntList l;
      for (int i = 1; i <= lua_gettop(L); i++) {
        TC_CHECK(lua_isinteger(L, i), ValueError, "tc.Size: sizes must be integers, got %s", luaL_typename(L, i));
        l.push_back(lua_tointeger(L, i));
      }
      v = Value(l);
    }
    if (v.is_tensor_list() && v.tensors().empty()) v = Value(IntList{});
    TC_CHECK(v.is_int_list(), ValueError, "tc.Size: expected a list of integers");
    push_size(L, v.ints());
    return 1;
  });
}

void open_dtypes(lua_State* L) {
  // tc table at -1
  luaL_newmetatable(L, kDTypeMeta);
  lua_pushcfunction(L, dtype_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  lua_createtable(L, kNumDTypes, 0);  // registry tc.dtypes: DType + 1 -> object
  for (int i = 0; i < kNumDTypes; i++) {
    DType t = (DType)i;
    lua_createtable(L, 0, 5);
    lua_pushstring(L, dtype_name(t));
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, (lua_Integer)itemsize(t));
    lua_setfield(L, -2, "itemsize");
    lua_pushboolean(L, is_floating(t));
    lua_setfield(L, -2, "is_floating_point");
    lua_pushboolean(L, t != DType::Bool && t != DType::UInt8);
    lua_setfield(L, -2, "is_signed");
    lua_pushinteger(L, i);
    lua_setfield(L, -2, "_id");
    luaL_setmetatable(L, kDTypeMeta);
    lua_pushvalue(L, -1);
    lua_setfield(L, -4, dtype_name(t));  // tc.float32 ...
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, LUA_REGISTRYINDEX, "tc.dtypes");
  const std::pair<const char*, DType> aliases[] = {{"float", DType::Float32}, {"double", DType::Float64},
                                                   {"half", DType::Float16},  {"long", DType::Int64},
                                                   {"int", DType::Int32}};
  for (auto& [name, t] : aliases) {
    push_dtype(L, t);
    lua_setfield(L, -2, name);
  }

  luaL_newmetatable(L, kSizeMeta);
  lua_pushcfunction(L, size_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pushcfunction(L, size_eq);
  lua_setfield(L, -2, "__eq");
  lua_newtable(L);
  lua_pushcfunction(L, size_numel);
  lua_setfield(L, -2, "numel");
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  lua_pushcfunction(L, l_size);
  lua_setfield(L, -2, "Size");
}

// ---- module functions --------------------------------------------------------------------------
int l_set_default_dtype(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    DType t;
    TC_CHECK(to_dtype(L, 1, &t), DTypeError, "set_default_dtype: expected a dtype such as tc.float64, got %s",
             luaL_typename(L, 1));
    set_default_dtype(t);
    return 0;
  });
}
int l_get_default_dtype(lua_State* L) {
  push_dtype(L, default_dtype());
  return 1;
}
int l_set_default_device(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    TC_CHECK(lua_type(L, 1) == LUA_TSTRING, ValueError, "set_default_device: expected a device string such as \"cpu\" or \"cuda\", got %s",
             luaL_typename(L, 1));
    set_default_device(Device::parse(lua_tostring(L, 1)));
    return 0;
  });
}
int l_get_default_device(lua_State* L) {
  std::string s = default_device().str();
  lua_pushlstring(L, s.data(), s.size());
  return 1;
}
int l_set_num_threads(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    TC_CHECK(lua_isinteger(L, 1) && lua_tointeger(L, 1) >= 1, ValueError,
             "set_num_threads: expected a positive integer");
    set_num_threads((int)lua_tointeger(L, 1));
    return 0;
  });
}
int l_get_num_threads(lua_State* L) {
  lua_pushinteger(L, get_num_threads());
  return 1;
}
int l_is_tensor(lua_State* L) {
  lua_pushboolean(L, to_tensor(L, 1) != nullptr);
  return 1;
}
int l_is_grad_enabled(lua_State* L) {
  lua_pushboolean(L, tc::grad_enabled());
  return 1;
}
int l_set_grad_enabled(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    TC_CHECK(lua_type(L, 1) == LUA_TBOOLEAN, ValueError, "set_grad_enabled: expected a boolean, got %s", luaL_typename(L, 1));
    tc::set_grad_enabled(lua_toboolean(L, 1));
    return 0;
  });
}
int l_manual_seed(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    TC_CHECK(lua_isinteger(L, 1), ValueError, "manual_seed: expected an integer seed, got %s", luaL_typename(L, 1));
    manual_seed((uint64_t)lua_tointeger(L, 1));
    return 0;
  });
}
int l_initial_seed(lua_State* L) {
  lua_pushinteger(L, (lua_Integer)initial_seed());
  return 1;
}
// tc.get_rng_state() -> {seed = s, offset = o}: the one Philox stream every device draws from
// (tc/random.h), so it is the CPU and the CUDA state at once; the seed's 64 bits as a Lua integer.
int l_get_rng_state(lua_State* L) {
  RngState s = get_rng_state();
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, (lua_Integer)s.seed);
  lua_setfield(L, -2, "seed");
  lua_pushinteger(L, (lua_Integer)s.offset);
  lua_setfield(L, -2, "offset");
  return 1;
}
// tc.set_rng_state(state): puts back a state from get_rng_state().
int l_set_rng_state(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    TC_CHECK(lua_type(L, 1) == LUA_TTABLE, ValueError, "set_rng_state: expected the table get_rng_state() returned, got %s",
             luaL_typename(L, 1));
    lua_getfield(L, 1, "seed");
    lua_getfield(L, 1, "offset");
    TC_CHECK(lua_isinteger(L, -2) && lua_isinteger(L, -1), ValueError,
             "set_rng_state: the state needs integer fields seed and offset (from get_rng_state()), got %s and %s",
             luaL_typename(L, -2), luaL_typename(L, -1));
    RngState s{(uint64_t)lua_tointeger(L, -2), (uint64_t)lua_tointeger(L, -1)};
    lua_pop(L, 2);
    set_rng_state(s);
    return 0;
  });
}
int l_perf_counter(lua_State* L) {
  auto now = std::chrono::steady_clock::now().time_since_epoch();
  lua_pushnumber(L, std::chrono::duration<double>(now).count());
  return 1;
}
int l_live_bytes(lua_State* L) {
  lua_pushinteger(L, Storage::live_bytes());
  return 1;
}
// tc.memory.set_cpu_limit(bytes): CPU tensor memory past `bytes` is out of memory (0: no limit).
int l_set_cpu_limit(lua_State* L) {
  Storage::set_cpu_limit(luaL_checkinteger(L, 1));
  return 0;
}
int l_set_matmul_precision(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    set_float32_matmul_precision(luaL_checkstring(L, 1));
    return 0;
  });
}
int l_get_matmul_precision(lua_State* L) {
  lua_pushstring(L, float32_matmul_precision().c_str());
  return 1;
}

// ---- tc._C: primitives for tc's own Lua code ---------------------------------------------------
int c_dtype(lua_State* L) {  // dtype object for an object or a name, or nil
  DType t;
  if (!to_dtype(L, 1, &t)) return 0;
  push_dtype(L, t);
  return 1;
}
int c_is_dtype(lua_State* L) {
  DType t;
  lua_pushboolean(L, lua_type(L, 1) == LUA_TTABLE && to_dtype(L, 1, &t));
  return 1;
}
int c_device(lua_State* L) {  // normalized device string ("cuda" -> "cuda:0"), or a ValueError
  return guarded(L, [](lua_State* L) {
    TC_CHECK(lua_type(L, 1) == LUA_TSTRING, ValueError, "expected a device string such as \"cpu\" or \"cuda\", got %s",
             luaL_typename(L, 1));
    std::string s = Device::parse(lua_tostring(L, 1)).str();
    lua_pushlstring(L, s.data(), s.size());
    return 1;
  });
}
int c_host(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, kHostKey);
  return 1;
}
int c_footer(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    std::string s = tensor_footer(check_tensor(L, 1, "tensor"));
    lua_pushlstring(L, s.data(), s.size());
    return 1;
  });
}

// Trampoline for tc's Lua-side functions (upvalue 1): a C frame between the user's code and tc's
// Lua code. Without it, `return x:max(y)` in user code tail-calls tc's Lua function, Lua drops
// the user's frame, and an error could no longer name the user's line.
int trampoline_k(lua_State* L, int, lua_KContext) { return lua_gettop(L); }
int trampoline(lua_State* L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_callk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, trampoline_k);
  return lua_gettop(L);
}

// tc._C.wrap_functions(t): replaces every Lua function in table t by a trampoline to it.
int c_wrap_functions(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    if (lua_type(L, -1) == LUA_TFUNCTION && !lua_iscfunction(L, -1)) {
      lua_pushcclosure(L, trampoline, 1);
      lua_pushvalue(L, -2);
      lua_insert(L, -2);
      lua_rawset(L, 1);  // replacing the value of an existing key is allowed during lua_next
    } else {
      lua_pop(L, 1);
    }
  }
  return 0;
}

// tc._C.wrap(f): a trampoline to the Lua function f (f itself if it is a C function). For tc's
// Lua modules that install functions or metamethods (__call of modules) reached from user code.
int c_wrap(lua_State* L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  if (!lua_iscfunction(L, 1)) lua_pushcclosure(L, trampoline, 1);
  return 1;
}

void set_funcs(lua_State* L, const char* field, const luaL_Reg* fns) {
  // tc table at -1; fns go into tc[field] (created if missing) or tc itself when field is null
  if (field) {
    lua_getfield(L, -1, field);
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      lua_newtable(L);
      lua_pushvalue(L, -1);
      lua_setfield(L, -3, field);
    }
  } else {
    lua_pushvalue(L, -1);
  }
  luaL_setfuncs(L, fns, 0);
  lua_pop(L, 1);
}

}  // namespace

bool trampoline_target(lua_State* L, int idx) {
  if (lua_tocfunction(L, idx) != trampoline) return false;
  lua_getupvalue(L, idx, 1);
  return true;
}

bool grad_enabled() { return tc::grad_enabled(); }
void set_grad_enabled(bool on) { tc::set_grad_enabled(on); }

}  // namespace tc::lua

using namespace tc::lua;

extern "C" int tc_open_library(lua_State* L) {
  lua_getfield(L, LUA_REGISTRYINDEX, kModuleKey);
  if (lua_istable(L, -1)) return 1;  // already opened in this state
  lua_pop(L, 1);

  lua_newtable(L);  // tc
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, kModuleKey);
  lua_pushstring(L, TC_VERSION);
  lua_setfield(L, -2, "__version");
  lua_newtable(L);
  lua_setfield(L, -2, "_C");

  open_errors(L);
  open_dtypes(L);
  open_tensor_type(L);
  open_ops(L);
  open_create(L);
  open_autograd(L);
  open_safetensors(L);

  const luaL_Reg fns[] = {{"set_default_dtype", l_set_default_dtype},
                          {"get_default_dtype", l_get_default_dtype},
                          {"set_default_device", l_set_default_device},
                          {"get_default_device", l_get_default_device},
                          {"set_float32_matmul_precision", l_set_matmul_precision},
                          {"get_float32_matmul_precision", l_get_matmul_precision},
                          {"set_num_threads", l_set_num_threads},
                          {"get_num_threads", l_get_num_threads},
                          {"is_tensor", l_is_tensor},
                          {"is_grad_enabled", l_is_grad_enabled},
                          {"set_grad_enabled", l_set_grad_enabled},
                          {"manual_seed", l_manual_seed},
                          {"initial_seed", l_initial_seed},
                          {"get_rng_state", l_get_rng_state},
                          {"set_rng_state", l_set_rng_state},
                          {nullptr, nullptr}};
  set_funcs(L, nullptr, fns);
  const luaL_Reg utils[] = {{"perf_counter", l_perf_counter}, {nullptr, nullptr}};
  set_funcs(L, "utils", utils);
  const luaL_Reg memory[] = {
      {"live_bytes", l_live_bytes}, {"set_cpu_limit", l_set_cpu_limit}, {nullptr, nullptr}};
  set_funcs(L, "memory", memory);
  open_cuda(L);
  open_distributed(L);
  const luaL_Reg prims[] = {{"dtype", c_dtype},   {"is_dtype", c_is_dtype}, {"device", c_device},
                            {"host", c_host},     {"footer", c_footer},     {"is_tensor", l_is_tensor},
                            {"wrap_functions", c_wrap_functions}, {"wrap", c_wrap},
                            {nullptr, nullptr}};
  set_funcs(L, "_C", prims);

  // Embedded Lua: tc._* parts run now, in name order; the rest become preloadable modules.
  int tc_idx = lua_gettop(L);
  bool have_preload = false;
  if (lua_getglobal(L, "package") == LUA_TTABLE) have_preload = lua_getfield(L, -1, "preload") == LUA_TTABLE;
  int preload_idx = lua_gettop(L);
  for (size_t i = 0; i < sizeof kModules / sizeof kModules[0]; i++) {
    const EmbeddedModule& m = kModules[i];
    if (std::strncmp(m.name, "tc._", 4) == 0) {
      if (load_module(L, m) != LUA_OK) return lua_error(L);
      lua_pushvalue(L, tc_idx);
      lua_getfield(L, tc_idx, "Tensor");
      lua_getfield(L, tc_idx, "_C");
      lua_call(L, 3, 0);
    } else if (have_preload) {
      lua_pushinteger(L, (lua_Integer)i);
      lua_pushcclosure(L, preload_loader, 1);
      lua_setfield(L, preload_idx, m.name);
    }
  }
  lua_settop(L, tc_idx);
  // tc's Lua functions (in tc and its sub-tables: tc.Tensor, tc.compiler ...) get trampolines.
  lua_pushcfunction(L, c_wrap_functions);
  lua_pushvalue(L, tc_idx);
  lua_call(L, 1, 0);
  lua_pushnil(L);
  while (lua_next(L, tc_idx)) {
    if (lua_type(L, -1) == LUA_TTABLE && lua_type(L, -2) == LUA_TSTRING && std::strcmp(lua_tostring(L, -2), "_C") != 0) {
      lua_pushcfunction(L, c_wrap_functions);
      lua_insert(L, -2);
      lua_call(L, 1, 0);
    } else {
      lua_pop(L, 1);
    }
  }
  return 1;
}
