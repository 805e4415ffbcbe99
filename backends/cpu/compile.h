// Loop IR to running code: the kernel caches (in memory per process, object code on disk) in front
// of codegen + LLVM, and the Program that runs the graph's launch list.
//
//   Program p = compile_lowered(lowered);       // compiles only kernels not seen before
//   std::vector<Tensor> outs = p.run(inputs);
#pragma once
#include <string>

#include "runtime.h"

namespace tc::backends::cpu {

// Throws tc::Error (CompileError) when a kernel cannot be generated or LLVM fails. `report`, if
// given, gets codegen and LLVM times and kernel counts added.
Program compile_lowered(const lower::LoweredGraph& g, capture::CompileReport* report = nullptr);

// Counters behind tc/cpu_backend.h's stats() (compile.cpp owns them).
void count_graph(bool fallback, double lower_seconds);
// A graph's lowered form: read from the disk cache (`hit`) or lowered; `rejected`: a stored plan
// was discarded.
void count_plan(bool hit, bool rejected);

}  // namespace tc::backends::cpu
