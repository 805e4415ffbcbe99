// The Lua side of ahead-of-time packages: `tc.export`, `tc.aot.compile`, `tc.aot.load` (the Lua
// module tc.aot, stdlib/lua/tc.aot.lua) call the native functions this installs as
// package.loaded["tc._aot_native"]. tcrun installs it after tc::capture::install.
#pragma once

struct lua_State;

namespace tc::aot {

void install(lua_State* L);

}  // namespace tc::aot
