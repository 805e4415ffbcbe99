// tc::vm bytecode tools: print a script's Lua 5.4 bytecode, and check resume synthesis on it.
//
// Worked example (what `tcrun --bytecode` and `tcrun --split-check` do):
//
//   #include <tc/vm/bytecode.h>
//   #include <lua.hpp>
//
//   int main() {
//     // Prints every function of model.lua like `luac5.4 -l -l model.lua` (same instruction
//     // names, operands, constants, locals and upvalues). Errors go to stderr; returns 0 or 1.
//     if (tc::vm::print_bytecode("model.lua", std::cout) != 0) return 1;
//
//     // cases.lua returns a table of test cases { {fn, arg1, arg2, ...}, ... }. For every case
//     // and every legal resume pc of fn (and of the functions nested in it), the harness runs fn
//     // up to that pc, hands its live registers to a synthesized resume function, and checks that
//     // results, errors and side effects equal an uninterrupted run.
//     lua_State* L = luaL_newstate();
//     luaL_openlibs(L);
//     int rc = tc::vm::split_check(L, "cases.lua", std::cout);  // prints "N passed, M failed"
//     lua_close(L);
//     return rc;  // 0 iff every check passed
//   }
//
// The bytecode layer itself (reader, opcode table, printer, writer, verifier, analysis and resume
// synthesis) lives in vm/bytecode/ and is internal to tc.
#pragma once

#include <ostream>

struct lua_State;

namespace tc::vm {

// Loads `path` (luaL_loadfile in a fresh lua_State), dumps it with lua_dump, reads the dump with
// tc's reader and prints every function as `luac5.4 -l -l` does. Returns 0, or 1 with a message
// on stderr when the file cannot be loaded or the dump cannot be read.
int print_bytecode(const char* path, std::ostream& out);

// Runs the split-check harness on the cases file `path` in `L` (a state with the standard
// libraries open). Prints one line per checked function and "N passed, M failed" last; returns 0
// iff nothing failed.
int split_check(lua_State* L, const char* path, std::ostream& out);

}  // namespace tc::vm
