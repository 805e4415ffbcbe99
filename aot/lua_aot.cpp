// tc._aot_native (tc/aot_lua.h): compile an exported graph to a package, load a package as a
// callable userdata with load_constants.
#include <lua.hpp>

#include <array>
#include <cctype>
#include <new>

#include "compile.h"
#include "lua_binding.h"
#include "tc/aot.h"
#include "tc/aot_lua.h"
#include "tc/capture.h"

namespace tc::aot {
namespace {

constexpr const char* kPackageMeta = "tc.aot.Package";

Package* check_pkg(lua_State* L) { return static_cast<Package*>(luaL_checkudata(L, 1, kPackageMeta)); }

std::string field_string(lua_State* L, int t, const char* k, const char* dflt) {
  lua_getfield(L, t, k);
  std::string s = lua_isnil(L, -1) ? dflt : luaL_checkstring(L, -1);
  lua_pop(L, 1);
  return s;
}

std::vector<std::string> string_list(lua_State* L, int t, const char* k) {
  std::vector<std::string> out;
  lua_getfield(L, t, k);
  for (lua_Integer i = 1; lua_istable(L, -1) && i <= (lua_Integer)lua_rawlen(L, -1); i++) {
    lua_rawgeti(L, -1, i);
    out.push_back(luaL_checkstring(L, -1));
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return out;
}

// compile(gm, spec, opts) -> report table. spec = {graph_inputs = {{constant = bool, index = k}},
// input_names = {...}, constant_names = {...}, constant_values = {...}}; opts = {path, device,
// package_constants}.
int native_compile(lua_State* L) {
  return lua::guarded(L, [](lua_State* L) {
    std::shared_ptr<const capture::Graph> g = capture::graph_of_gm(L, 1);
    TC_CHECK(g != nullptr, ValueError, "tc.aot.compile: expected an exported program");
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    ExportSpec spec;
    lua_getfield(L, 2, "graph_inputs");
    for (lua_Integer i = 1; i <= (lua_Integer)lua_rawlen(L, -1); i++) {
      lua_rawgeti(L, -1, i);
      lua_getfield(L, -1, "constant");
      lua_getfield(L, -2, "index");
      spec.graph_inputs.push_back({(bool)lua_toboolean(L, -2), (int)luaL_checkinteger(L, -1) - 1});
      lua_pop(L, 3);
    }
    lua_pop(L, 1);
    spec.input_names = string_list(L, 2, "input_names");
    spec.code = field_string(L, 2, "code", "");
    lua_getfield(L, 2, "input_specs");
    for (lua_Integer i = 1; lua_istable(L, -1) && i <= (lua_Integer)lua_rawlen(L, -1); i++) {
      lua_rawgeti(L, -1, i);
      TensorSpec ts;
      ts.name = i <= (lua_Integer)spec.input_names.size() ? spec.input_names[i - 1] : "";
      TC_CHECK(dtype_from_name(field_string(L, -1, "dtype", "float32"), &ts.dtype), ValueError, "tc.aot: bad input dtype");
      lua_getfield(L, -1, "shape");
      for (lua_Integer d = 1; d <= (lua_Integer)lua_rawlen(L, -1); d++) {
        lua_rawgeti(L, -1, d);
        ts.shape.push_back(luaL_checkinteger(L, -1));
        lua_pop(L, 1);
      }
      lua_pop(L, 1);
      lua_getfield(L, -1, "ranges");  // {{dim (1-based), min, max}, ...}
      for (lua_Integer k = 1; lua_istable(L, -1) && k <= (lua_Integer)lua_rawlen(L, -1); k++) {
        lua_rawgeti(L, -1, k);
        std::array<int64_t, 3> r{};
        for (int f = 0; f < 3; f++) {
          lua_rawgeti(L, -1, f + 1);
          r[size_t(f)] = luaL_checkinteger(L, -1);
          lua_pop(L, 1);
        }
        r[0] -= 1;
        ts.ranges.push_back(r);
        lua_pop(L, 1);
      }
      lua_pop(L, 2);
      spec.input_specs.push_back(std::move(ts));
    }
    lua_pop(L, 1);
    spec.constant_names = string_list(L, 2, "constant_names");
    lua_getfield(L, 2, "constant_values");
    for (lua_Integer i = 1; lua_istable(L, -1) && i <= (lua_Integer)spec.constant_names.size(); i++) {
      lua_rawgeti(L, -1, i);
      spec.constant_values.push_back(lua::check_tensor(L, -1, "constant value"));
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    AotOptions o;
    o.path = field_string(L, 3, "path", "");
    o.device = field_string(L, 3, "device", "cpu");
    lua_getfield(L, 3, "arch");
    o.arch = (int)luaL_optinteger(L, -1, 0);
    lua_pop(L, 1);
    lua_getfield(L, 3, "package_constants");
    o.package_constants = lua_toboolean(L, -1);
    lua_pop(L, 1);
    AotReport r = compile_package(*g, spec, o);
    lua_createtable(L, 0, 8);
    auto num = [&](const char* k, double v) {
      lua_pushnumber(L, v);
      lua_setfield(L, -2, k);
    };
    num("lower_ms", r.lower_ms);
    num("codegen_ms", r.codegen_ms);
    num("compile_ms", r.compile_ms);
    num("write_ms", r.write_ms);
    for (auto [k, v] : {std::pair<const char*, int64_t>{"kernels", r.kernels},
                        {"distinct_kernels", r.distinct_kernels},
                        {"externs", r.externs},
                        {"bytes", (int64_t)r.bytes}}) {
      lua_pushinteger(L, v);
      lua_setfield(L, -2, k);
    }
    return 1;
  });
}

// code(gm, names) -> the graph's listing with its inputs renamed (names[i] for graph input i:
// the export's input names and constant names, dots as underscores).
int native_code(lua_State* L) {
  return lua::guarded(L, [](lua_State* L) {
    std::shared_ptr<const capture::Graph> g = capture::graph_of_gm(L, 1);
    TC_CHECK(g != nullptr, ValueError, "tc.aot: expected an exported program's graph");
    capture::Graph copy = *g;
    for (size_t i = 0; i < copy.inputs.size(); i++) {
      lua_rawgeti(L, 2, (lua_Integer)i + 1);
      if (lua_type(L, -1) == LUA_TSTRING) {
        std::string name = lua_tostring(L, -1);
        for (char& c : name)
          if (!std::isalnum((unsigned char)c)) c = '_';
        copy.nodes[copy.inputs[i]].name = name;
      }
      lua_pop(L, 1);
    }
    std::string code = copy.print_code();
    lua_pushlstring(L, code.data(), code.size());
    return 1;
  });
}

int native_load(lua_State* L) {
  return lua::guarded(L, [](lua_State* L) {
    const char* path = luaL_checkstring(L, 1);
    int cuda_device = 0;
    if (lua_istable(L, 2)) {
      const std::string d = field_string(L, 2, "device", "cuda:0");
      const Device dev = Device::parse(d);
      TC_CHECK(dev.is_cuda(), ValueError, "tc.aot.load(): device must be a CUDA device (\"cuda:1\"), got \"%s\"",
               d.c_str());
      cuda_device = dev.index;
    }
    Package p = Package::load(path, cuda_device);
    void* mem = lua_newuserdatauv(L, sizeof(Package), 0);
    new (mem) Package(std::move(p));
    luaL_setmetatable(L, kPackageMeta);
    return 1;
  });
}

int pkg_call(lua_State* L) {
  check_pkg(L);
  return lua::guarded(L, [](lua_State* L) {
    const Package& p = *static_cast<Package*>(lua_touserdata(L, 1));
    std::vector<Tensor> in;
    for (int i = 2; i <= lua_gettop(L); i++) in.push_back(lua::check_tensor(L, i, "package input"));
    std::vector<Tensor> out = p.run(in);
    luaL_checkstack(L, (int)out.size() + 2, "package outputs");
    for (const Tensor& t : out) lua::push_tensor(L, t);
    lua::gc_pressure(L);
    return (int)out.size();
  });
}

// pkg:load_constants(state_dict, {strict = true})
int pkg_load_constants(lua_State* L) {
  check_pkg(L);
  return lua::guarded(L, [](lua_State* L) {
    Package& p = *static_cast<Package*>(lua_touserdata(L, 1));
    TC_CHECK(lua_istable(L, 2), ValueError, "load_constants(state_dict): expected a table of name = tensor, got %s",
             luaL_typename(L, 2));
    bool strict = true;
    if (lua_istable(L, 3)) {
      lua_getfield(L, 3, "strict");
      strict = lua_isnil(L, -1) || lua_toboolean(L, -1);
      lua_pop(L, 1);
    }
    std::map<std::string, Tensor> sd;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      TC_CHECK(lua_type(L, -2) == LUA_TSTRING, ValueError, "load_constants: state dict keys are names (strings), got %s",
               luaL_typename(L, -2));
      std::string name = lua_tostring(L, -2);
      const Tensor* t = lua::to_tensor(L, -1);
      TC_CHECK(t != nullptr, ValueError, "load_constants: the value for '%s' is a %s, not a tensor", name.c_str(),
               luaL_typename(L, -1));
      sd[name] = *t;
      lua_pop(L, 1);
    }
    p.load_constants(sd, strict);
    lua_settop(L, 1);
    return 1;
  });
}

void push_specs(lua_State* L, const std::vector<TensorSpec>& specs) {
  lua_createtable(L, (int)specs.size(), 0);
  for (size_t i = 0; i < specs.size(); i++) {
    const TensorSpec& s = specs[i];
    lua_createtable(L, 0, 4);
    lua_pushstring(L, s.name.c_str());
    lua_setfield(L, -2, "name");
    lua_pushstring(L, dtype_name(s.dtype));
    lua_setfield(L, -2, "dtype");
    lua_createtable(L, (int)s.shape.size(), 0);
    for (size_t d = 0; d < s.shape.size(); d++) {
      lua_pushinteger(L, s.shape[d]);
      lua_rawseti(L, -2, (lua_Integer)d + 1);
    }
    lua_setfield(L, -2, "shape");
    lua_createtable(L, (int)s.dynamic.size(), 0);
    for (size_t d = 0; d < s.dynamic.size(); d++) {
      lua_pushinteger(L, s.dynamic[d] + 1);  // 1-based dims, as tc's Lua API
      lua_rawseti(L, -2, (lua_Integer)d + 1);
    }
    lua_setfield(L, -2, "dynamic");
    lua_pushstring(L, s.str().c_str());
    lua_setfield(L, -2, "str");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

int pkg_manifest(lua_State* L) {
  const Manifest& m = check_pkg(L)->manifest();
  lua_createtable(L, 0, 10);
  lua_pushinteger(L, m.format_version);
  lua_setfield(L, -2, "format_version");
  for (auto [k, v] : {std::pair{"tc_version", &m.tc_version}, {"device", &m.device}, {"target", &m.target},
                      {"code", &m.code}}) {
    lua_pushstring(L, v->c_str());
    lua_setfield(L, -2, k);
  }
  lua_pushboolean(L, m.constants_packaged);
  lua_setfield(L, -2, "constants_packaged");
  push_specs(L, m.inputs);
  lua_setfield(L, -2, "inputs");
  push_specs(L, m.outputs);
  lua_setfield(L, -2, "outputs");
  push_specs(L, m.constants);
  lua_setfield(L, -2, "constants");
  return 1;
}

int pkg_constants(lua_State* L) {
  const Package& p = *check_pkg(L);
  lua_newtable(L);
  for (const auto& [name, t] : p.constants()) {
    lua::push_tensor(L, t);
    lua_setfield(L, -2, name.c_str());
  }
  return 1;
}

int pkg_tostring(lua_State* L) {
  const Manifest& m = check_pkg(L)->manifest();
  std::string s = "tc.aot.Package(" + m.device + "; inputs:";
  for (const TensorSpec& t : m.inputs) s += " " + t.name + ": " + t.str();
  s += "; outputs:";
  for (const TensorSpec& t : m.outputs) s += " " + t.str();
  s += "; " + std::to_string(m.constants.size()) + " constants" + (m.constants_packaged ? ", packaged" : "") + ")";
  lua_pushstring(L, s.c_str());
  return 1;
}

int pkg_gc(lua_State* L) {
  static_cast<Package*>(lua_touserdata(L, 1))->~Package();
  return 0;
}

}  // namespace

void install(lua_State* L) {
  if (luaL_newmetatable(L, kPackageMeta)) {
    const luaL_Reg meta[] = {{"__call", pkg_call}, {"__tostring", pkg_tostring}, {"__gc", pkg_gc}, {nullptr, nullptr}};
    luaL_setfuncs(L, meta, 0);
    lua_newtable(L);
    const luaL_Reg methods[] = {{"load_constants", pkg_load_constants},
                                {"manifest", pkg_manifest},
                                {"constants", pkg_constants},
                                {nullptr, nullptr}};
    luaL_setfuncs(L, methods, 0);
    lua_setfield(L, -2, "__index");
  }
  lua_pop(L, 1);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  lua_newtable(L);
  const luaL_Reg fns[] = {{"compile", native_compile}, {"load", native_load}, {"code", native_code}, {nullptr, nullptr}};
  luaL_setfuncs(L, fns, 0);
  lua_setfield(L, -2, "tc._aot_native");
  lua_pop(L, 1);
}

}  // namespace tc::aot
