// Getting lua_dump bytes: of the function on top of a Lua stack, or of a Lua file.
#pragma once

#include <string>

struct lua_State;

namespace tc::vm {

// lua_dump of the Lua function at the top of L's stack (left there); throws BytecodeError
// for C functions.
std::string dump_function(lua_State* L, bool strip = false);

// luaL_loadfile in a fresh state, then lua_dump; throws BytecodeError with Lua's message.
std::string load_and_dump_file(const char* path);

// lua_load of a binary chunk (mode "b"); pushes the function, or throws BytecodeError with Lua's
// message (nothing pushed).
void load_binary(lua_State* L, const std::string& bytes, const char* chunkname);

}  // namespace tc::vm
