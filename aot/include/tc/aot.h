// Ahead-of-time packages (docs/aot.md): load a `.tcpkg` written by `tc.aot.compile` and run it,
// with no Lua, no tracing and no code generation (the package holds the compiled kernels and the
// launch list with its memory plan; loading parses it and links the object code).
//
//   #include <tc/aot.h>
//   tc::aot::Package p = tc::aot::Package::load("layer.tcpkg");   // validates, links, or throws
//   p.load_constants({{"linear1.weight", w1}, {"linear1.bias", b1}, ...});  // strict by default
//   std::vector<tc::Tensor> out = p.run({x});
//
// A package made with `package_constants = true` carries its weights (load_constants is then
// optional: it replaces them). Copies of a Package share the loaded program and copy only the
// constant bindings, so one package loaded once can serve 64 layers, each with its own weights.
// Errors are tc::Error: ValueError for bad packages and bad inputs/constants, DeviceError for a
// package made for a device this machine lacks.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tc/tensor.h"

namespace tc::aot {

// The package format this tc writes and reads (docs/aot.md).
constexpr uint32_t kFormatVersion = 2;

// One tensor of the package's signature: a user input, an output, or a constant (a parameter or
// buffer lifted out of the module, named as in its state dict: "layers.1.linear1.weight").
struct TensorSpec {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;  // export-time sizes (dynamic dims: the example's size)
  std::vector<int> dynamic;    // 0-based dims of any size
  // dynamic dims with bounds, {dim (0-based), min, max}: a size outside is refused at run time
  std::vector<std::array<int64_t, 3>> ranges;
  std::string str() const;     // "float32[s0, 10]"; a bounded dim "2..64"
};

struct Manifest {
  uint32_t format_version = kFormatVersion;
  std::string tc_version;
  std::string device;  // "cpu" or "cuda"
  std::string target;  // cpu: "<triple> <cpu name> <features>"; cuda: "sm_90"
  std::vector<TensorSpec> inputs, outputs, constants;
  bool constants_packaged = false;
  std::string code;  // the exported graph, printed (ExportedProgram:code())
};

class Package {
 public:
  // Reads and validates the file (magic, format version, section checksums, tc version, device and
  // CPU features or GPU arch) and links its kernels (a CUDA package: on CUDA device
  // `cuda_device`). Throws tc::Error naming the path and problem.
  static Package load(const std::string& path, int cuda_device = 0);

  // Binds constants by name (tensors on the package's device, each of the recorded dtype and
  // shape; a whole model's state dict may be given: names the package lacks are ignored). strict:
  // every constant of the package must be given; non-strict: missing ones keep their current
  // binding. Errors name the constant; after an error nothing is bound. Contiguous tensors are
  // bound by reference, not copied (PyTorch's user_managed): in-place updates of the model's
  // weights are seen by the package.
  void load_constants(const std::map<std::string, Tensor>& constants, bool strict = true);
  // Runs the package on the user inputs (checked against the input specs); throws ValueError when
  // a constant is still unbound.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs) const;

  const Manifest& manifest() const;
  std::vector<std::string> constant_names() const;
  // The currently bound constants by name (unbound ones absent).
  std::map<std::string, Tensor> constants() const;

  struct Loaded;  // the parsed plan and linked program, shared by copies

 private:
  std::shared_ptr<const Loaded> loaded_;
  std::vector<Tensor> constants_;  // per manifest().constants entry; undefined = unbound
};

}  // namespace tc::aot
