// aot_load_example: a C++ program that runs an ahead-of-time package (tc/aot.h) and links no Lua:
// no tracing, no code generation, no interpreter — the package's kernels and launch list only.
//
//   aot_load_example PACKAGE CONSTANTS.safetensors INPUTS.safetensors [OUTPUTS.safetensors] [--repeat N]
//
// binds every tensor of CONSTANTS by name (load_constants, strict; "-" for none: the package's
// own), runs the package on the tensors of INPUTS (in file order), prints each output's shape
// and first values, and writes them to OUTPUTS ("output 1", ...) when given. --repeat N times N
// runs and prints the mean and best time per run. Make a package with tc.aot.compile (docs/aot.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tc/aot.h"
#include "tc/error.h"
#include "tc/ops.h"
#include "tc/safetensors.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s PACKAGE CONSTANTS.safetensors|- INPUTS.safetensors [OUTPUTS.safetensors] [--repeat N]\n",
                 argv[0]);
    return 2;
  }
  std::string out_path;
  int repeat = 0;
  for (int i = 4; i < argc; i++) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) repeat = std::atoi(argv[++i]);
    else out_path = argv[i];
  }
  try {
    auto t0 = std::chrono::steady_clock::now();
    tc::aot::Package pkg = tc::aot::Package::load(argv[1]);
    double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // a CUDA package takes its constants and inputs on the GPU
    const tc::Device device = pkg.manifest().device == "cuda" ? tc::Device{tc::DeviceType::CUDA, 0} : tc::Device{};
    auto on_device = [&](const tc::Tensor& t) {
      return t.device() == device ? t : tc::call1(tc::Op::to_device, {tc::Value(t), tc::Value(device)});
    };
    if (std::strcmp(argv[2], "-") != 0) {
      std::map<std::string, tc::Tensor> constants;
      for (auto& [name, t] : tc::load_safetensors(argv[2]).tensors) constants[name] = on_device(t);
      pkg.load_constants(constants, /*strict=*/true);
    }
    std::vector<tc::Tensor> inputs;
    for (auto& [name, t] : tc::load_safetensors(argv[3]).tensors) inputs.push_back(on_device(t));
    std::vector<tc::Tensor> outs = pkg.run(inputs);
    for (tc::Tensor& o : outs) o = o.device().is_cpu() ? o : tc::call1(tc::Op::to_device, {tc::Value(o), tc::Value(tc::Device{})});
    std::printf("loaded %s in %.2f ms: %zu inputs, %zu outputs, %zu constants\n", argv[1], load_ms, inputs.size(),
                outs.size(), pkg.constant_names().size());
    std::vector<std::pair<std::string, tc::Tensor>> named;
    for (size_t i = 0; i < outs.size(); i++) {
      const tc::Tensor& o = outs[i];
      tc::Tensor c = o.contiguous();
      std::printf("output %zu: %s[", i + 1, tc::dtype_name(o.dtype()));
      for (int64_t d = 0; d < o.dim(); d++) std::printf("%s%lld", d ? ", " : "", (long long)o.size(d));
      std::printf("]");
      if (o.dtype() == tc::DType::Float32)
        for (int64_t k = 0; k < std::min<int64_t>(4, c.numel()); k++) std::printf(" %.6g", static_cast<const float*>(c.data_ptr())[k]);
      std::printf("\n");
      named.emplace_back("output " + std::to_string(i + 1), c);
    }
    if (!out_path.empty()) tc::save_safetensors(out_path, named);
    if (repeat > 0) {  // mean and best per call (the best is the least disturbed on a busy machine)
      double total = 0, best = 1e30;
      for (int i = 0; i < repeat; i++) {
        auto t1 = std::chrono::steady_clock::now();
        pkg.run(inputs);
        double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count();
        total += us;
        best = std::min(best, us);
      }
      std::printf("per call: mean %.2f us, best %.2f us (%d calls)\n", total / repeat, best, repeat);
    }
  } catch (const tc::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
