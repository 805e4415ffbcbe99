// tc::vm::install_compiler: tc.compile for an embedding program. A tc::vm::Runtime alone runs
// tc's Lua library uncompiled (tc.compile returns functions unchanged, with a one-time notice on
// stderr); this installs what tcrun has: capture (tc.compile, tc.compiler), every backend (eager,
// cpu through LLVM, cuda through NVRTC where built with the CUDA toolkit) and tc.export / tc.aot.
//
//   #include <tc/vm/runtime.h>
//   #include <tc/vm/compiler.h>
//
//   tc::vm::Runtime rt;
//   tc::vm::install_compiler(rt);
//   rt.run_string(R"(
//     local tc = require "tc"
//     local f = tc.compile(function(x) return x:sin() * 2 end)
//     f(tc.ones(8))
//     assert(tc.compiler.stats().backend_compiles == 1)
//   )");
//
// It is not in the tc::vm library but in tc::tc, the whole of tc:
//   CMake:      find_package(tc REQUIRED) ... target_link_libraries(app PRIVATE tc::tc)
//   pkg-config: c++ -std=c++20 app.cpp $(pkg-config --cflags --libs tc)
// (README.md, "Embedding tc in a C++ program").
#pragma once
#include "tc/vm/runtime.h"

namespace tc::vm {

// Installs tc.compile, tc.compiler, tc.export and tc.aot into the runtime's `tc` module, replacing
// the uncompiled ones. Call it once, before the first tc.compile.
void install_compiler(Runtime& rt);

}  // namespace tc::vm
