// Test helpers: compile Lua source to a Proto tree, find instructions, load and call protos.
#pragma once

#include <gtest/gtest.h>

#include <lua.hpp>

#include <string>

#include "dump.h"
#include "opcodes.h"
#include "proto.h"

namespace tc::vm::testing {

inline Proto compile(const std::string& source, const char* name = "=test") {
  lua_State* L = luaL_newstate();
  if (luaL_loadbuffer(L, source.data(), source.size(), name) != LUA_OK) {
    std::string msg = lua_tostring(L, -1);
    lua_close(L);
    throw BytecodeError("compile: " + msg);
  }
  Proto p = read_chunk(dump_function(L));
  lua_close(L);
  return p;
}

// pc of the n-th (0-based) instruction with this opcode, or -1.
inline int find_op(const Proto& f, OpCode op, int nth = 0) {
  for (int pc = 0; pc < int(f.code.size()); pc++)
    if (decode(f.code[pc]).op == op && nth-- == 0) return pc;
  return -1;
}

}  // namespace tc::vm::testing
