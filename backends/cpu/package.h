// The CPU code generator's side of ahead-of-time packages (aot/, docs/aot.md): every kernel of a
// lowered graph in ONE object file that a later process links without LLVM codegen.
//
//   ObjectCode oc = compile_object(lowered, &report);   // oc.symbols[i]: lowered.kernels[i]
//   // ... the package stores oc.object; loading it (aot/package.cpp):
//   void* lib = ObjectLoader::get().load_library(oc.object);   // object_loader.h, at load
//   auto fn = (KernelFn)ObjectLoader::get().lookup(lib, oc.symbols[i]);
#pragma once
#include <string>
#include <vector>

#include "lower/loop_ir.h"
#include "tc/capture/graph.h"

namespace tc::backends::cpu {

struct ObjectCode {
  std::string object;                // an ELF relocatable object for the host CPU
  std::vector<std::string> symbols;  // per kernel: `sym` and `sym`_info are defined in `object`
};

// Generates and compiles all kernels of `g` (O3, host CPU) into one object, through the disk
// cache (TC_CACHE_DIR, key prefix "package"). Throws tc::Error (CompileError) as compile_lowered.
ObjectCode compile_object(const lower::LoweredGraph& g, capture::CompileReport* report = nullptr);

}  // namespace tc::backends::cpu
