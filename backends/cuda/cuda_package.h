// The CUDA code generator's side of ahead-of-time packages (aot/, docs/aot.md): a package holds
// the CudaCode that compile_lowered makes (cuda_program.h: every kernel and strategy, the tiny
// graph's kernel, the cubins of its NVRTC programs), so a loaded package runs exactly what
// tc.compile runs. This file is its JSON form and the architecture check at load.
//
//   CudaCode code = generate_code(lowered, 90, &report);       // at tc.aot.compile (no GPU needed)
//   json k = kernel_code_to_json(code, i), c = code_to_json(code);  // the plan's "code" entries
//   Program p = load_program(lowered, device, code_from_json(ks, c, 90, cubins));   // at load
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda_program.h"

namespace tc::backends::cuda {

// The architecture of `device` (cc major * 10 + minor); DeviceError without a usable GPU.
int device_arch(int device);

// Kernel `i`'s strategies and functions ({"shapes", "names"}), and what belongs to the whole
// graph ({"tiny", "tiny_params", "tiny_smem", "tiny_block", "key"}; tiny_block 256 when absent);
// the cubins are not in it.
nlohmann::json kernel_code_to_json(const CudaCode& code, size_t i);
nlohmann::json code_to_json(const CudaCode& code);
// Throws ValueError naming what is malformed.
CudaCode code_from_json(const std::vector<nlohmann::json>& kernels, const nlohmann::json& code, int arch,
                        std::vector<std::string> cubins);

// load_code on `device`, after checking that its architecture runs sm_<code.arch> cubins
// (DeviceError naming both when not).
Program load_program(lower::LoweredGraph g, int device, const CudaCode& code);

}  // namespace tc::backends::cuda
