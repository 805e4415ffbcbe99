// lua_dump / lua_load glue between Lua states and byte strings.
#include "dump.h"

#include <lua.hpp>

#include <memory>

#include "proto.h"

namespace tc::vm {
namespace {

int append(lua_State*, const void* p, size_t size, void* ud) {
  static_cast<std::string*>(ud)->append(static_cast<const char*>(p), size);
  return 0;
}

}  // namespace

std::string dump_function(lua_State* L, bool strip) {
  if (!lua_isfunction(L, -1) || lua_iscfunction(L, -1))
    throw BytecodeError("lua_dump needs a Lua function, got " +
                        std::string(luaL_typename(L, -1)));
  std::string bytes;
  if (lua_dump(L, append, &bytes, strip) != 0) throw BytecodeError("lua_dump failed");
  return bytes;
}

std::string load_and_dump_file(const char* path) {
  std::unique_ptr<lua_State, decltype(&lua_close)> L(luaL_newstate(), &lua_close);
  if (!L) throw BytecodeError("cannot create a Lua state");
  if (luaL_loadfile(L.get(), path) != LUA_OK) {
    std::string msg = lua_tostring(L.get(), -1) ? lua_tostring(L.get(), -1) : "unknown error";
    throw BytecodeError(msg);
  }
  return dump_function(L.get());
}

void load_binary(lua_State* L, const std::string& bytes, const char* chunkname) {
  if (luaL_loadbufferx(L, bytes.data(), bytes.size(), chunkname, "b") != LUA_OK) {
    std::string msg = lua_tostring(L, -1) ? lua_tostring(L, -1) : "unknown error";
    lua_pop(L, 1);
    throw BytecodeError("lua_load rejected a chunk: " + msg);
  }
}

}  // namespace tc::vm
