// Cubins for AOT packages, and the Program rebuilt from them (cuda_package.h).
#include "cuda_package.h"

#include <chrono>

#include "cpu/disk_cache.h"
#include "cuda/runtime.h"
#include "tc/cuda.h"
#include "tc/error.h"

namespace tc::backends::cuda {

namespace drv = tc::cuda;

int device_arch(int device) {
  TC_CHECK(drv::device_count() > device, DeviceError, "no CUDA device %d on this machine", device);
  drv::DeviceState& ds = drv::dev(device);
  return ds.cc_major * 10 + ds.cc_minor;
}

CubinCode compile_cubins(const lower::LoweredGraph& g, int arch, capture::CompileReport* report) {
  capture::CompileReport local;
  capture::CompileReport& r = report ? *report : local;
  auto t0 = std::chrono::steady_clock::now();
  CubinCode code;
  code.arch = arch;
  std::string source = drv::prelude() + codegen_prelude();
  const std::vector<bool> noalias = lower::kernels_without_aliasing(g);
  for (size_t i = 0; i < g.kernels.size(); i++) {
    code.shapes.push_back(plan_kernel(g.kernels[i], noalias[i]));
    code.names.emplace_back();
    for (size_t j = 0; j < code.shapes.back().size(); j++) {
      const std::string name = "tcpkg_k" + std::to_string(i) + "_s" + std::to_string(j);
      source += "\n" + emit_kernel(g.kernels[i], name, code.shapes.back()[j]);
      code.names.back().push_back(name);
    }
  }
  r.distinct_kernels += (int)g.kernels.size();
  auto t1 = std::chrono::steady_clock::now();
  r.codegen_ms += std::chrono::duration<double, std::milli>(t1 - t0).count();
  if (g.kernels.empty()) return code;
  const std::string key = "tc " TC_VERSION " cuda package nvrtc " + drv::nvrtc_version() + " sm_" +
                          std::to_string(arch) + "\n" + source;
  std::string cubin;
  if (cpu::cache_read(key, &cubin, "cuda") == cpu::CacheRead::Hit) {
    r.cached_kernels += (int)g.kernels.size();
  } else {
    cubin = drv::compile_cubin(source, arch);
    cpu::cache_write(key, cubin, "cuda");
  }
  r.compile_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  code.cubins.push_back(std::move(cubin));
  return code;
}

Program load_program(lower::LoweredGraph g, int device, const CubinCode& code) {
  const int arch = device_arch(device);
  // A cubin runs on its own major architecture, at its minor version or a later one.
  TC_CHECK(arch / 10 == code.arch / 10 && arch >= code.arch, DeviceError,
           "the package's kernels are compiled for sm_%d; CUDA device %d is sm_%d (%s): compile the package for it",
           code.arch, device, arch, drv::device_name(device).c_str());
  TC_CHECK(code.shapes.size() == g.kernels.size() && code.names.size() == g.kernels.size(), ValueError,
           "the package's plan lists %zu kernels but %zu kernel launch plans", g.kernels.size(), code.shapes.size());
  Program p;
  p.device = device;
  p.shapes = code.shapes;
  std::vector<CUmodule> modules;
  for (const std::string& cubin : code.cubins) {
    CUmodule mod;
    drv::check(drv::drv().ModuleLoadData(&mod, cubin.data()), "loading a package's CUDA module");
    modules.push_back(mod);
  }
  for (const auto& names : code.names) {
    p.functions.emplace_back();
    for (const std::string& name : names) {
      CUfunction f = nullptr;
      for (CUmodule m : modules)
        if (!f && drv::drv().ModuleGetFunction(&f, m, name.c_str()) != CUDA_SUCCESS) f = nullptr;
      TC_CHECK(f != nullptr, ValueError, "the package's cubins lack kernel %s", name.c_str());
      p.functions.back().push_back((void*)f);
    }
  }
  p.graph = std::move(g);
  p.prepare_static_launches();
  return p;
}

}  // namespace tc::backends::cuda
