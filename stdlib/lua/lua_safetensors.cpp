// tc.save / tc.load: the Lua face of tc::save_safetensors / tc::load_safetensors.
//
//   tc.save(path, {name = tensor, ...} [, {key = "value", ...}])   -- metadata: string -> string
//   local tensors, metadata = tc.load(path [, {map_location = "cpu"}])
//
// Tensors are written in name order. Malformed files raise tc.IOError at the caller's line (the
// reader validates every rule; see tc/safetensors.h); bad arguments raise ValueError.
#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "lua_binding.h"
#include "tc/safetensors.h"

namespace tc::lua {
namespace {

std::string string_at(lua_State* L, int idx, const char* what) {
  TC_CHECK(lua_type(L, idx) == LUA_TSTRING, ValueError, "%s must be a string, got %s", what, luaL_typename(L, idx));
  size_t n = 0;
  const char* s = lua_tolstring(L, idx, &n);
  return std::string(s, n);
}

int l_save(lua_State* L) {
  return guarded(L, [](lua_State* L) {
    std::string path = string_at(L, 1, "tc.save(path, tensors): path");
    TC_CHECK(lua_type(L, 2) == LUA_TTABLE, ValueError,
             "tc.save(path, tensors): tensors must be a table of name = tensor, got %s", luaL_typename(L, 2));
    std::vector<std::pair<std::string, Tensor>> tensors;
    lua_pushnil(L);
    while (lua_next(L, 2) != 0) {
      TC_CHECK(lua_type(L, -2) == LUA_TSTRING, ValueError,
               "tc.save: tensor names must be strings, got a %s key", luaL_typename(L, -2));
      std::string name = lua_tostring(L, -2);
      const Tensor* t = to_tensor(L, -1);
      TC_CHECK(t != nullptr, ValueError, "tc.save: value for '%s' must be a tensor, got %s", name.c_str(),
               luaL_typename(L, -1));
      tensors.emplace_back(std::move(name), *t);
      lua_pop(L, 1);
    }
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::map<std::string, std::string> metadata;
    if (!lua_isnoneornil(L, 3)) {
      TC_CHECK(lua_type(L, 3) == LUA_TTABLE, ValueError,
               "tc.save(path, tensors, metadata): metadata must be a table of strings, got %s", luaL_typename(L, 3));
      lua_pushnil(L);
      while (lua_next(L, 3) != 0) {
        TC_CHECK(lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TSTRING, ValueError,
                 "tc.save: metadata must map strings to strings, got %s -> %s", luaL_typename(L, -2),
                 luaL_typename(L, -1));
        metadata[lua_tostring(L, -2)] = lua_tostring(L, -1);
        lua_pop(L, 1);
      }
    }
    std::error_code ec;
    TC_CHECK(!std::filesystem::is_directory(path, ec), IOError,
             "tc.save(\"%s\"): the path is a directory; give a file name", path.c_str());
    save_safetensors(path, tensors, metadata);
    return 0;
  });
}

int l_load(lua_State* L) {
  int n = guarded(L, [](lua_State* L) {
    std::string path = string_at(L, 1, "tc.load(path): path");
    bool move = false;
    Device device;
    if (!lua_isnoneornil(L, 2)) {
      TC_CHECK(lua_type(L, 2) == LUA_TTABLE, ValueError, "tc.load(path, opts): opts must be a table, got %s",
               luaL_typename(L, 2));
      lua_pushnil(L);
      while (lua_next(L, 2) != 0) {
        TC_CHECK(lua_type(L, -2) == LUA_TSTRING, ValueError, "tc.load(): option names must be strings");
        std::string key = lua_tostring(L, -2);
        TC_CHECK(key == "map_location", ValueError, "tc.load() got an unexpected option '%s' (options: map_location)",
                 key.c_str());
        std::string where = string_at(L, -1, "tc.load(): map_location");
        device = Device::parse(where);
        move = true;
        lua_pop(L, 1);
      }
    }
    std::error_code ec;  // the reader would fail on a directory with the C++ library's text
    TC_CHECK(!std::filesystem::is_directory(path, ec), IOError,
             "tc.load(\"%s\"): the path is a directory, not a safetensors file", path.c_str());
    SafetensorsFile f = load_safetensors(path);
    lua_createtable(L, 0, (int)f.tensors.size());
    for (auto& [name, t] : f.tensors) {
      Tensor r = t;
      if (move && !(r.device() == device)) r = call1(Op::to_device, {Value(r), Value(device)});
      push_tensor(L, r);
      lua_setfield(L, -2, name.c_str());
    }
    lua_createtable(L, 0, (int)f.metadata.size());
    for (auto& [k, v] : f.metadata) {
      lua_pushlstring(L, v.data(), v.size());
      lua_setfield(L, -2, k.c_str());
    }
    return 2;
  });
  gc_pressure(L);
  return n;
}

}  // namespace

// Registers tc.save and tc.load into the tc table at the top of the stack.
void open_safetensors(lua_State* L) {
  lua_pushcfunction(L, l_save);
  lua_setfield(L, -2, "save");
  lua_pushcfunction(L, l_load);
  lua_setfield(L, -2, "load");
}

}  // namespace tc::lua
