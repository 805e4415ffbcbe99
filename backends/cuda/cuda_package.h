// The CUDA code generator's side of ahead-of-time packages (aot/, docs/aot.md): a lowered
// graph's kernels as cubins for one architecture (NVRTC only: no GPU needed), and the Program
// that runs them, rebuilt from a package's plan and cubins without generating code.
//
//   CubinCode code = compile_cubins(lowered, 90, &report);        // at tc.aot.compile
//   Program p = load_program(lowered, device, code);               // at load: cuModuleLoadData
#pragma once
#include <string>
#include <vector>

#include "cuda_program.h"

namespace tc::backends::cuda {

struct CubinCode {
  int arch = 0;  // sm_<arch>: 90 for sm_90
  // Per graph kernel, per strategy (plan_kernel): how it launches and its entry point's name.
  std::vector<std::vector<KernelShape>> shapes;
  std::vector<std::vector<std::string>> names;
  std::vector<std::string> cubins;  // the modules holding those entry points
};

// The architecture of `device` (cc major * 10 + minor); DeviceError without a usable GPU.
int device_arch(int device);

// Generates every kernel of `g` (each strategy it may launch with) and compiles them with NVRTC
// for sm_<arch>, through the disk cache. Throws CompileError (codegen, NVRTC) or DeviceError
// (no NVRTC). Tiny-graph mode is not used.
CubinCode compile_cubins(const lower::LoweredGraph& g, int arch, capture::CompileReport* report = nullptr);

// Loads the cubins on `device` and returns the launch list (`g` with its kernels' loop IR, which
// the launch geometry is computed from). DeviceError when the device's architecture cannot run
// sm_<code.arch> cubins.
Program load_program(lower::LoweredGraph g, int device, const CubinCode& code);

}  // namespace tc::backends::cuda
