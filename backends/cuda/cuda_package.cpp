// The package form of a CudaCode, and loading it (cuda_package.h).
#include "cuda_package.h"

#include "cuda/runtime.h"
#include "tc/cuda.h"
#include "tc/error.h"

namespace tc::backends::cuda {

namespace drv = tc::cuda;
using nlohmann::json;

int device_arch(int device) {
  TC_CHECK(drv::device_count() > device, DeviceError, "no CUDA device %d on this machine", device);
  drv::DeviceState& ds = drv::dev(device);
  return ds.cc_major * 10 + ds.cc_minor;
}

json kernel_code_to_json(const CudaCode& code, size_t i) {
  json shapes = json::array();
  for (const KernelShape& sh : code.shapes.at(i))
    shapes.push_back({sh.threads_per_row, sh.block, sh.index32, sh.noalias, sh.unroll, sh.device_fn, sh.vec, sh.split, sh.variant, sh.warp_row});
  return {{"shapes", shapes}, {"names", code.names.at(i)}};
}

json code_to_json(const CudaCode& code) {
  return {{"tiny", code.tiny}, {"tiny_params", code.tiny_params}, {"tiny_smem", code.tiny_smem},
          {"tiny_block", code.tiny_block}, {"key", code.key}};
}

CudaCode code_from_json(const std::vector<json>& kernels, const json& j, int arch, std::vector<std::string> cubins) {
  CudaCode code;
  code.arch = arch;
  try {
    for (const json& k : kernels) {
      code.shapes.emplace_back();
      for (const json& sh : k.at("shapes")) {
        KernelShape s{sh.at(0).get<int>(), sh.at(1).get<int>(), sh.at(2).get<bool>(),
                      sh.at(3).get<bool>(), sh.at(4).get<int>(), sh.at(5).get<bool>()};
        if (sh.size() > 8) s.vec = sh.at(6).get<int>(), s.split = sh.at(7).get<int>(), s.variant = sh.at(8).get<bool>();
        if (sh.size() > 9) s.warp_row = sh.at(9).get<int>();
        code.shapes.back().push_back(s);
      }
      code.names.push_back(k.at("names").get<std::vector<std::string>>());
    }
    code.tiny = j.at("tiny").get<std::string>();
    code.tiny_params = j.at("tiny_params").get<std::vector<int>>();
    code.tiny_smem = j.at("tiny_smem").get<int64_t>();
    code.tiny_block = j.value("tiny_block", 256);
    code.key = j.at("key").get<std::string>();
  } catch (const json::exception& e) {
    TC_FAIL(ValueError, "the plan's CUDA kernel code is malformed: %s", e.what());
  }
  code.cubins = std::move(cubins);
  return code;
}

Program load_program(lower::LoweredGraph g, int device, const CudaCode& code) {
  const int arch = device_arch(device);
  // A cubin runs on its own major architecture, at its minor version or a later one.
  TC_CHECK(arch / 10 == code.arch / 10 && arch >= code.arch, DeviceError,
           "the package's kernels are compiled for sm_%d; CUDA device %d is sm_%d (%s): compile the package for it",
           code.arch, device, arch, drv::device_name(device).c_str());
  return load_code(std::move(g), device, code);
}

}  // namespace tc::backends::cuda
