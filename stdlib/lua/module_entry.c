/* Entry point of the tc.so C module for stock lua5.4: `require "tc"`. */
#include <lua.h>

int tc_open_library(lua_State* L); /* stdlib/lua/binding: builds the tc table */

int luaopen_tc(lua_State* L) { return tc_open_library(L); }
