// Loop-IR kernels to LLVM IR (IRBuilder): each kernel becomes two exported functions of the
// graph's module,
//
//   void <sym>(void* const* buffers, const int64_t* sizes, int64_t begin, int64_t end);
//   void <sym>_info(const int64_t* sizes, int64_t* out);  // out[0] outer elements, out[1] work each
//
// The first runs the outer iterations [begin, end) of the flattened outer index space (the
// runtime splits that range over threads); the second evaluates the preamble to size the launch.
// A two-level kernel (Kernel::outer_reductions) has a third,
//
//   void <sym>_final(void* const* buffers, const int64_t* sizes, const void* partials, int64_t parts);
//
// and its <sym> also writes the partial results of its range [begin, end) into the array that
// buffers[number of buffer parameters] points to (kPartialBytes per outer reduction); _final
// combines `parts` such arrays (consecutive in `partials`) in order and runs Kernel::final.
#pragma once
#include <memory>
#include <string>

#include "lower/loop_ir.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace tc::backends::cpu {

using KernelFn = void (*)(void* const* buffers, const int64_t* sizes, int64_t begin, int64_t end);
using KernelInfoFn = void (*)(const int64_t* sizes, int64_t* out);
using KernelFinalFn = void (*)(void* const* buffers, const int64_t* sizes, const void* partials, int64_t parts);
constexpr int kPartialBytes = 8;  // per outer reduction of a two-level kernel

// Byte string identifying a kernel's structure (everything but its name and sources) plus how it
// is compiled: equal keys compile to the same code.
std::string kernel_key(const lower::Kernel& k, bool noalias);
// The exported symbol of a kernel with that key ("tck_" + 128-bit hash).
std::string kernel_symbol(const std::string& key);

// Adds `k` to `m` as the functions named `symbol` and `symbol`_info. `noalias`: no buffer
// parameter written by the kernel shares memory with another parameter (lets loops vectorize
// without runtime alias checks). Throws tc::Error (CompileError) naming the construct it cannot
// generate.
void emit_kernel(llvm::Module& m, const lower::Kernel& k, const std::string& symbol, bool noalias);

// A new module with the data layout and triple of the host JIT set by the caller.
std::unique_ptr<llvm::Module> new_module(llvm::LLVMContext& ctx, const std::string& name);

}  // namespace tc::backends::cpu
