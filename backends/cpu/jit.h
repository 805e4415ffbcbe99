// The process's LLVM ORC JIT (LLJIT for the host CPU): the only file that compiles with ORC, so
// that LLVM upgrades change one place (research/codegen.md §5.4); object_loader.h links AOT
// packages' objects with ORC's JITLink alone.
//
//   Jit& jit = Jit::get();
//   std::string obj = jit.compile(std::move(module), std::move(ctx));  // O3, returns the object
//   jit.add_object(obj_from_disk);                                     // or load a cached one
//   auto fn = (KernelFn)jit.lookup("tck_...");
#pragma once
#include <memory>
#include <mutex>
#include <string>

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace tc::backends::cpu {

class Jit {
 public:
  // The JIT, created on first use; throws tc::Error (CompileError) if LLVM cannot target the host.
  static Jit& get();

  // Sets the host data layout, triple and target attributes on `m` (call before emitting code).
  void prepare(llvm::Module& m) const;
  // Adds the module through the O3 transform layer, materializes it and returns its object code
  // (captured through the compile layer's ObjectCache hook, for the disk cache).
  std::string compile(std::unique_ptr<llvm::Module> m, std::unique_ptr<llvm::LLVMContext> ctx);
  // Links an object produced by compile() (possibly in an earlier process).
  void add_object(const std::string& object);
  // Address of an exported symbol of a compiled or loaded module; throws if absent.
  void* lookup(const std::string& symbol);

  // Ahead-of-time packages (aot/): an object built from `m` with the same O3 pipeline and target
  // as compile(), NOT added to this process's JIT (packages link it with ObjectLoader).
  std::string compile_object(std::unique_ptr<llvm::Module> m);
  // The host CPU's name and LLVM feature string ("+avx2,+fma,-avx512f,...").
  const std::string& cpu_name() const;
  const std::string& cpu_features() const;

  // What compiled code depends on besides its IR: tc, codegen and LLVM versions, host CPU name and
  // features. Part of every disk cache key.
  const std::string& target_id() const { return target_id_; }
  // Serializes compile/add_object/lookup (LLJIT's default session runs materialization inline).
  std::mutex& mutex() { return mu_; }

  struct Impl;

 private:
  Jit();
  std::unique_ptr<Impl> impl_;
  std::string target_id_;
  std::mutex mu_;
};

}  // namespace tc::backends::cpu
