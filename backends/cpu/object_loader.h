// Links ahead-of-time compiled object code (AOT packages' kernels, aot/) into this process with
// LLVM's JITLink alone: no code generator and no optimizer are linked in (the process's Jit has
// both), so a program that only loads packages (scripts/aot_load_example.cpp) stays small.
//
//   std::lock_guard<std::mutex> lock(ObjectLoader::get().mutex());
//   void* lib = ObjectLoader::get().load_library(object);      // once per distinct object
//   auto fn = (KernelFn)ObjectLoader::get().lookup(lib, "tck_...");
#pragma once
#include <memory>
#include <mutex>
#include <string>

namespace tc::backends::cpu {

class ObjectLoader {
 public:
  // Created on first use; throws tc::Error (CompileError) if LLVM cannot link for this host.
  static ObjectLoader& get();

  // Links `object` (an ELF relocatable object for this host) in a library of its own, resolving
  // its undefined symbols against the process, and returns the library; the same object bytes
  // again return the same library. Throws CompileError when linking fails.
  void* load_library(const std::string& object);
  // Address of `symbol` in a library; throws CompileError when absent.
  void* lookup(void* library, const std::string& symbol);
  std::mutex& mutex() { return mu_; }

  struct Impl;

 private:
  ObjectLoader();
  std::unique_ptr<Impl> impl_;
  std::mutex mu_;
};

// The host CPU's name and LLVM feature string ("+avx2,+fma,-avx512f,..."), as the Jit compiles
// for (llvm::sys's host detection), without creating a JIT.
std::string host_cpu_name();
std::string host_cpu_features();

}  // namespace tc::backends::cpu
