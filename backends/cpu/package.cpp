// All kernels of a graph in one object file, for AOT packages (package.h).
#include "package.h"

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <chrono>
#include <map>

#include "codegen.h"
#include "disk_cache.h"
#include "jit.h"

namespace tc::backends::cpu {

ObjectCode compile_object(const lower::LoweredGraph& g, capture::CompileReport* report) {
  capture::CompileReport local;
  capture::CompileReport& r = report ? *report : local;
  auto t0 = std::chrono::steady_clock::now();
  ObjectCode oc;
  const std::vector<bool> noalias = lower::kernels_without_aliasing(g);
  std::map<std::string, std::pair<const lower::Kernel*, std::string>> distinct;  // symbol -> kernel, key
  for (size_t i = 0; i < g.kernels.size(); i++) {
    std::string key = kernel_key(g.kernels[i], noalias[i]);
    oc.symbols.push_back(kernel_symbol(key));
    distinct.emplace(oc.symbols.back(), std::make_pair(&g.kernels[i], std::move(key)));
  }
  r.distinct_kernels += (int)distinct.size();
  Jit& jit = Jit::get();
  std::string module_key = "package\n" + jit.target_id();
  for (const auto& [sym, kk] : distinct) module_key += "\n" + sym + ":" + kk.second;
  std::lock_guard<std::mutex> lock(jit.mutex());
  CacheRead read;
  oc.object = cached(module_key, "cpu", [&] {
    auto ctx = std::make_unique<llvm::LLVMContext>();
    std::unique_ptr<llvm::Module> m = new_module(*ctx, "tc_package");
    jit.prepare(*m);
    for (const auto& [sym, kk] : distinct) emit_kernel(*m, *kk.first, sym, kk.second[0] == 'N');
    auto t1 = std::chrono::steady_clock::now();
    r.codegen_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
    t0 = t1;  // (the rest is LLVM's)
    return jit.compile_object(std::move(m));
  }, &read);
  if (read == CacheRead::Hit) r.cached_kernels += (int)distinct.size();
  r.compile_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return oc;
}

}  // namespace tc::backends::cpu
