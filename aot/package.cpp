// tc::aot::Package (tc/aot.h): validate, parse, link, bind constants, run. No Lua, no lowering,
// no code generation: the plan is the CPU backend's launch list and the object its kernels.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <sstream>

#include <llvm/TargetParser/Host.h>

#include "container.h"
#include "cpu/object_loader.h"
#include "cpu/runtime.h"
#include "plan.h"
#include "tc/aot.h"
#include "tc/error.h"
#ifdef TC_HAVE_CUDA
#include "cuda/cuda_library_calls.h"
#include "cuda/cuda_package.h"
#include "tc/cuda.h"
#endif

namespace tc::aot {

struct Package::Loaded {
  std::string path;
  Manifest manifest;
  Device device;  // where inputs and constants live
  std::vector<GraphInput> graph_inputs;
  capture::CompiledGraph run;  // the device's launch list
  // dynamic dims that share a size symbol (equal in the example): checked on every run
  std::vector<lower::Symbol> symbols;
  std::vector<lower::TiedDim> tied;
};

namespace {

std::set<std::string> enabled_features(const std::string& features) {
  std::set<std::string> on;
  std::stringstream ss(features);
  std::string f;
  while (std::getline(ss, f, ','))
    if (!f.empty() && f[0] == '+') on.insert(f.substr(1));
  return on;
}

// The package's code needs every CPU feature it was compiled with (and the same target triple).
void check_cpu_target(const std::string& path, const std::string& target) {
  std::istringstream in(target);
  std::string triple, cpu, features;
  in >> triple >> cpu >> features;
  const std::string host_triple = llvm::sys::getProcessTriple();
  TC_CHECK(triple == host_triple, DeviceError, "tc.aot.load: '%s' was compiled for %s; this machine is %s",
           path.c_str(), triple.c_str(), host_triple.c_str());
  std::set<std::string> have = enabled_features(backends::cpu::host_cpu_features()), missing;
  for (const std::string& f : enabled_features(features))
    if (!have.count(f)) missing.insert(f);
  if (missing.empty()) return;
  std::string list;
  for (const std::string& f : missing) list += (list.empty() ? "" : ", ") + f;
  TC_FAIL(DeviceError, "tc.aot.load: '%s' was compiled for a %s CPU; this CPU (%s) lacks %s (compile it on this machine)",
          path.c_str(), cpu.c_str(), backends::cpu::host_cpu_name().c_str(), list.c_str());
}

std::string shape_str(const Tensor& t) {
  std::string s = std::string(dtype_name(t.dtype())) + "[";
  for (int64_t i = 0; i < t.dim(); i++) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// Whether `t` fits `spec`: dtype, rank, static sizes (dynamic dims take any size in their range).
bool fits(const Tensor& t, const TensorSpec& spec) {
  if (t.dtype() != spec.dtype || t.dim() != (int64_t)spec.shape.size()) return false;
  for (const auto& [d, lo, hi] : spec.ranges)
    if (t.size(d) < lo || t.size(d) > hi) return false;
  for (size_t d = 0; d < spec.shape.size(); d++)
    if (std::find(spec.dynamic.begin(), spec.dynamic.end(), (int)d) == spec.dynamic.end() &&
        t.size((int64_t)d) != spec.shape[d])
      return false;
  return true;
}

// The plan's per-kernel code entries, read with json's errors turned into ValueErrors.
template <typename F>
void parsing_code(const std::string& path, F&& f) {
  try {
    f();
  } catch (const nlohmann::json::exception& e) {
    TC_FAIL(ValueError, "tc.aot.load: '%s': the plan's kernel code is malformed: %s", path.c_str(), e.what());
  }
}

Tensor p_device(const Tensor& t, Device d) {
  return t.device() == d ? t : call1(Op::to_device, {Value(t), Value(d)});
}

}  // namespace

Package Package::load(const std::string& path, int cuda_device) {
  std::vector<Section> sections = read_container(path);
  const Section* ms = find_section(sections, "manifest");
  const Section* ps = find_section(sections, "plan");
  TC_CHECK(ms && ps, ValueError, "tc.aot.load: '%s' has no %s section", path.c_str(), ms ? "plan" : "manifest");
  auto loaded = std::make_shared<Loaded>();
  loaded->path = path;
  nlohmann::json mj, pj;
  try {
    mj = nlohmann::json::parse(ms->data);
    pj = nlohmann::json::parse(ps->data);
  } catch (const nlohmann::json::exception& e) {
    TC_FAIL(ValueError, "tc.aot.load: '%s' is corrupted (%s)", path.c_str(), e.what());
  }
  Manifest& m = loaded->manifest = manifest_from_json(mj);
  TC_CHECK(m.tc_version == TC_VERSION, ValueError,
           "tc.aot.load: '%s' was made by tc %s; this is tc %s (compile it again with this version)", path.c_str(),
           m.tc_version.c_str(), TC_VERSION);
  std::vector<nlohmann::json> code;
  nlohmann::json graph_code;
  lower::LoweredGraph lg;
  LibraryCalls calls;
#ifdef TC_HAVE_CUDA
  if (m.device == "cuda") calls = backends::cuda::library_call;
#endif
  plan_from_json(pj, &lg, &loaded->graph_inputs, &code, &graph_code, calls);
  loaded->symbols = lg.symbols;
  loaded->tied = lg.tied;
  if (m.device == "cuda") {
#ifdef TC_HAVE_CUDA
    const bool gpu = cuda::device_count() > 0;
#else
    const bool gpu = false;
#endif
    TC_CHECK(gpu, DeviceError, "tc.aot.load: '%s' is a CUDA package (%.40s); this machine has no CUDA GPU",
             path.c_str(), m.target.c_str());
#ifdef TC_HAVE_CUDA
    TC_CHECK(cuda_device >= 0 && cuda_device < cuda::device_count(), DeviceError,
             "tc.aot.load: no CUDA device %d (this machine has %d)", cuda_device, cuda::device_count());
    TC_CHECK(m.target.rfind("sm_", 0) == 0, ValueError, "tc.aot.load: '%s' names no CUDA architecture ('%s')",
             path.c_str(), m.target.c_str());
    std::vector<std::string> cubins;
    for (const Section& sec : sections)
      if (sec.name.rfind("cuda.cubin.", 0) == 0) cubins.push_back(sec.data);
    backends::cuda::CudaCode cc;
    try {
      cc = backends::cuda::code_from_json(code, graph_code, std::atoi(m.target.c_str() + 3), std::move(cubins));
    } catch (const Error& e) {
      TC_FAIL(ValueError, "tc.aot.load: '%s': %s", path.c_str(), e.what());
    }
    try {
      auto program = std::make_shared<const backends::cuda::Program>(
          backends::cuda::load_program(std::move(lg), cuda_device, cc));
      loaded->run = [program](capture::GraphInputs in) { return program->run(in); };
    } catch (const Error& e) {  // the device's architecture (DeviceError), a cubin the driver refuses
      throw Error(e.kind(), "tc.aot.load: '" + path + "': " + e.what());
    }
    loaded->device = Device{DeviceType::CUDA, cuda_device};
#endif
  } else {
    TC_CHECK(m.device == "cpu", ValueError, "tc.aot.load: '%s' is for device '%s', which this tc does not know",
             path.c_str(), m.device.c_str());
    check_cpu_target(path, m.target);
    std::vector<std::string> symbols;
    parsing_code(path, [&] {
      for (const nlohmann::json& k : code) symbols.push_back(k["symbol"].get<std::string>());
    });
    const Section* obj = find_section(sections, "cpu.o");
    TC_CHECK(obj || symbols.empty(), ValueError, "tc.aot.load: '%s' has no cpu.o section", path.c_str());
    auto program = std::make_shared<backends::cpu::Program>();
    program->graph = std::move(lg);
    auto& loader = backends::cpu::ObjectLoader::get();
    {
      std::lock_guard<std::mutex> lock(loader.mutex());
      void* lib = symbols.empty() ? nullptr : loader.load_library(obj->data);
      TC_CHECK(symbols.size() == program->graph.kernels.size(), ValueError,
               "tc.aot.load: '%s' has %zu kernel symbols for %zu kernels", path.c_str(), symbols.size(),
               program->graph.kernels.size());
      for (size_t i = 0; i < symbols.size(); i++)
        program->kernels.push_back(backends::cpu::find_kernel(program->graph.kernels[i], symbols[i],
                                                              [&](const std::string& n) { return loader.lookup(lib, n); }));
    }
    program->prepare_static_launches();
    std::shared_ptr<const backends::cpu::Program> run = program;
    loaded->run = [run](capture::GraphInputs in) { return run->run(in); };
    loaded->device = Device{};
  }
  Package p;
  const Device p_dev = loaded->device;
  p.constants_.resize(m.constants.size());
  if (m.constants_packaged) {
    const Section* cs = find_section(sections, "constants");
    TC_CHECK(cs, ValueError, "tc.aot.load: '%s' has no constants section", path.c_str());
    size_t at = 0;
    for (size_t i = 0; i < m.constants.size(); i++) {
      const TensorSpec& c = m.constants[i];
      int64_t bytes = -1;  // -1: a negative size, or a shape whose numel or bytes overflow
      try {
        if (std::all_of(c.shape.begin(), c.shape.end(), [](int64_t d) { return d >= 0; }))
          bytes = storage_nbytes(c.shape, contiguous_strides(c.shape), 0, c.dtype);
      } catch (const Error&) {
      }
      TC_CHECK(bytes >= 0, ValueError, "tc.aot.load: '%s' is corrupted (constant '%s' has the impossible shape %s)",
               path.c_str(), c.name.c_str(), shape_string(c.shape).c_str());
      const size_t n = (size_t)bytes;
      at = (at + 63) / 64 * 64;
      TC_CHECK(at <= cs->data.size() && n <= cs->data.size() - at, ValueError,
               "tc.aot.load: '%s' is corrupted (constant '%s' is cut off)", path.c_str(), c.name.c_str());
      Tensor t = Tensor::empty(c.shape, c.dtype);  // after the check: a damaged size allocates nothing
      std::memcpy(t.data_ptr(), cs->data.data() + at, n);
      at += n;
      p.constants_[i] = p_device(t, p_dev);
    }
  }
  p.loaded_ = std::move(loaded);
  return p;
}

void Package::load_constants(const std::map<std::string, Tensor>& constants, bool strict) {
  const Manifest& m = loaded_->manifest;
  std::vector<Tensor> bound = constants_;
  std::vector<std::string> missing;
  for (size_t i = 0; i < m.constants.size(); i++) {
    const TensorSpec& c = m.constants[i];
    auto it = constants.find(c.name);
    if (it == constants.end()) {
      missing.push_back(c.name);
      continue;
    }
    const Tensor& t = it->second;
    TC_CHECK(t.defined(), ValueError, "load_constants: constant '%s' is not a tensor", c.name.c_str());
    TC_CHECK(t.device() == loaded_->device, DeviceError, "load_constants: constant '%s' is on %s; the package runs on %s",
             c.name.c_str(), t.device().str().c_str(), loaded_->device.str().c_str());
    TC_CHECK(fits(t, c), ValueError, "load_constants: constant '%s' is %s; the package needs %s", c.name.c_str(),
             shape_str(t).c_str(), c.str().c_str());
    bound[i] = t.is_contiguous() ? t : t.contiguous();
  }
  if (strict && !missing.empty()) {
    std::string list;
    for (const std::string& x : missing) list += (list.empty() ? "'" : ", '") + x + "'";
    TC_FAIL(ValueError, "load_constants(strict): missing constant%s %s", missing.size() > 1 ? "s" : "", list.c_str());
  }
  constants_ = std::move(bound);
}

std::vector<Tensor> Package::run(const std::vector<Tensor>& inputs) const {
  const Manifest& m = loaded_->manifest;
  TC_CHECK(inputs.size() == m.inputs.size(), ValueError, "package '%s' takes %zu inputs, got %zu",
           loaded_->path.c_str(), m.inputs.size(), inputs.size());
  std::vector<Tensor> args(inputs.size());
  for (size_t i = 0; i < inputs.size(); i++) {
    const Tensor& t = inputs[i];
    const TensorSpec& s = m.inputs[i];
    TC_CHECK(t.defined(), ValueError, "package input %zu ('%s') is not a tensor", i + 1, s.name.c_str());
    TC_CHECK(t.device() == loaded_->device, DeviceError, "package input %zu ('%s') is on %s; the package runs on %s",
             i + 1, s.name.c_str(), t.device().str().c_str(), loaded_->device.str().c_str());
    TC_CHECK(fits(t, s), ValueError, "package input %zu ('%s') is %s; the package takes %s", i + 1, s.name.c_str(),
             shape_str(t).c_str(), s.str().c_str());
    args[i] = t.is_contiguous() ? t : t.contiguous();
  }
  std::vector<const Tensor*> ptrs;
  for (const GraphInput& g : loaded_->graph_inputs) {
    if (!g.constant) {
      ptrs.push_back(&args[g.index]);
      continue;
    }
    const Tensor& c = constants_[g.index];
    TC_CHECK(c.defined(), ValueError, "package '%s': constant '%s' is not bound (call load_constants first)",
             loaded_->path.c_str(), m.constants[g.index].name.c_str());
    ptrs.push_back(&c);
  }
  // dims that were equal in the export's example share one size in the package's code
  auto name_of = [&](int graph_input) {
    const GraphInput& g = loaded_->graph_inputs[size_t(graph_input)];
    return g.constant ? m.constants[g.index].name : m.inputs[g.index].name;
  };
  for (const lower::TiedDim& t : loaded_->tied) {
    const lower::Symbol& s = loaded_->symbols[size_t(t.symbol)];
    const int64_t a = ptrs[size_t(s.input)]->size(s.dim), b = ptrs[size_t(t.input)]->size(t.dim);
    TC_CHECK(a == b, ValueError,
             "package '%s': dim %d of '%s' (%lld) and dim %d of '%s' (%lld) must be equal: they were in the export's "
             "example, and the package's code shares one size between them (export with examples whose sizes differ "
             "to keep them apart)",
             loaded_->path.c_str(), s.dim + 1, name_of(s.input).c_str(), (long long)a, t.dim + 1,
             name_of(t.input).c_str(), (long long)b);
  }
  return loaded_->run(ptrs);
}

const Manifest& Package::manifest() const { return loaded_->manifest; }

std::vector<std::string> Package::constant_names() const {
  std::vector<std::string> out;
  for (const TensorSpec& c : loaded_->manifest.constants) out.push_back(c.name);
  return out;
}

std::map<std::string, Tensor> Package::constants() const {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < constants_.size(); i++)
    if (constants_[i].defined()) out[loaded_->manifest.constants[i].name] = constants_[i];
  return out;
}

}  // namespace tc::aot
