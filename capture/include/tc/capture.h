// tc::capture: tc.compile for Lua — symbolic tracing of Lua 5.4 bytecode into graphs, guards, the
// per-function code cache, graph breaks with resume functions, explain, fullgraph and logs.
//
//   #include <tc/capture.h>
//   #include <tc/backends.h>
//
//   tc::vm::Runtime rt("tcrun");                             // Lua with `tc` loaded
//   tc::capture::install(rt.state(), tc::backends::graph_compiler());
//   rt.run_string(R"(
//     local tc = require "tc"
//     local f = tc.compile(function(x, y) return tc.sin(x) + tc.cos(y) end)
//     print(f(tc.randn(10), tc.randn(10)))                   -- traced once, one graph
//   )");
//   tc::capture::print_explain(rt.state(), "text", stderr);   // what tcrun --explain prints
//
// install() replaces the uncompiled tc.compile / tc.compiler of the Lua binding by the real ones.
// Capture never sees a backend directly: the program hands it a GraphCompiler (capture cannot
// include the backends library, which depends on it).
#pragma once
#include <cstdio>
#include <memory>
#include <string>

#include "tc/capture/graph.h"

struct lua_State;

namespace tc::capture {

// Installs tc.compile and tc.compiler.* into the `tc` module of L (requires "tc" first).
void install(lua_State* L, GraphCompiler compiler);

// The graph inside the `gm` a Lua backend function receives (the value at `idx`), or null when
// that value is not one. tc.export (aot/) takes the exported graph from it.
std::shared_ptr<const Graph> graph_of_gm(lua_State* L, int idx);

// TC_LOGS / --log / tc.config.log: a comma-separated list of log names. Returns "" when every
// name is known, else the error ("unknown log 'bogus' (logs: graph_breaks, recompiles, ...)").
std::string check_logs(const std::string& list);

// tcrun --compile-all: besides the Lua functions called at graph breaks (always compiled), the
// Lua functions handed at a break to C functions that call them (pcall, xpcall, table.sort,
// string.gsub, coroutine.create/wrap) run compiled too. Process-wide, off by default.
void set_compile_all(lua_State* L, bool on);

// The explain report of everything compiled so far in this process (LUA_API.md §7), as "text"
// or "json".
std::string explain_report(const std::string& format);
void print_explain(lua_State* L, const std::string& format, FILE* out);

}  // namespace tc::capture
