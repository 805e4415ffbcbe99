// An exported graph to a package file (compile.h).
#include "compile.h"

#include <chrono>
#include <functional>
#include <map>

#include <llvm/TargetParser/Host.h>

#include "container.h"
#include "cpu/jit.h"
#include "cpu/package.h"
#include "lower/lower.h"
#include "tc/error.h"
#ifdef TC_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/cuda_library_calls.h"
#include "cuda/cuda_package.h"
#include "tc/cuda.h"
#endif

namespace tc::aot {

namespace {

// What the CPU code generator compiles for: the manifest's target (package.cpp checks it at load).
std::string target_of_host() {
  auto& jit = backends::cpu::Jit::get();
  return llvm::sys::getProcessTriple() + " " + jit.cpu_name() + " " + jit.cpu_features();
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

TensorSpec spec_of(const std::string& name, const Tensor& fake, std::vector<int> dynamic) {
  TensorSpec s;
  s.name = name;
  s.dtype = fake.dtype();
  s.shape = fake.sizes();
  s.dynamic = std::move(dynamic);
  return s;
}

// `g` with every tensor it makes on `dev` (fakes, and Device arguments such as arange's): a graph
// exported on the CPU compiles for CUDA and the other way round. Views keep their view_base
// links (lowering follows them), mapped onto the new fakes.
capture::Graph retarget(const capture::Graph& g, Device dev) {
  capture::Graph out = g;
  std::map<const TensorImpl*, std::shared_ptr<TensorImpl>> done;
  std::function<std::shared_ptr<TensorImpl>(const TensorImpl*)> move = [&](const TensorImpl* impl) {
    if (!impl) return std::shared_ptr<TensorImpl>();
    auto it = done.find(impl);
    if (it != done.end()) return it->second;
    auto copy = std::make_shared<TensorImpl>(*impl);
    copy->device = dev;
    done[impl] = copy;
    copy->view_base = move(impl->view_base.get());
    return copy;
  };
  auto fake = [&](const Tensor& t) { return t.defined() && t.is_fake() ? Tensor(move(t.impl())) : t; };
  for (capture::Node& n : out.nodes) {
    for (Value& v : n.fakes) {
      if (v.is_tensor()) v = Value(fake(v.tensor()));
      if (v.is_tensor_list()) {
        TensorList l;
        for (const Tensor& t : v.tensors()) l.push_back(fake(t));
        v = Value(std::move(l));
      }
    }
    for (capture::NodeArg& a : n.args)
      if (a.kind == capture::NodeArg::Kind::Const && a.constant.is_device()) a.constant = Value(dev);
  }
  return out;
}

}  // namespace

AotReport compile_package(const capture::Graph& g, const ExportSpec& spec, const AotOptions& o) {
  TC_CHECK(o.device == "cpu" || o.device == "cuda", ValueError,
           "tc.aot.compile: device must be \"cpu\" or \"cuda\", got \"%s\"", o.device.c_str());
  TC_CHECK(!o.path.empty(), ValueError, "tc.aot.compile: no path given (opts.path = \"model.tcpkg\")");
  TC_CHECK(spec.graph_inputs.size() == g.inputs.size(), ValueError,
           "tc.aot.compile: the export names %zu graph inputs, the graph has %zu", spec.graph_inputs.size(),
           g.inputs.size());
  AotReport r;
  Manifest m;
  m.tc_version = TC_VERSION;
  m.device = o.device;
  const bool cuda = o.device == "cuda";
  const capture::Graph rg = retarget(g, cuda ? Device{DeviceType::CUDA, 0} : Device{});
  m.code = spec.code.empty() ? g.print_code() : spec.code;
  m.constants_packaged = o.package_constants;
  m.inputs = spec.input_specs;
  m.inputs.resize(spec.input_names.size());
  for (size_t i = 0; i < m.inputs.size(); i++) m.inputs[i].name = spec.input_names[i];
  m.constants.resize(spec.constant_names.size());
  for (size_t i = 0; i < g.inputs.size(); i++) {
    const Tensor& fake = g.nodes[g.inputs[i]].fakes.at(0).tensor();
    std::vector<int> dyn;
    for (auto [in, d] : g.dynamic_dims)
      if (in == (int)i) dyn.push_back(d);
    const GraphInput& gi = spec.graph_inputs[i];
    if (gi.constant) {
      TC_CHECK(dyn.empty(), ValueError, "tc.aot.compile: constant '%s' has a dynamic dim",
               spec.constant_names[gi.index].c_str());
      m.constants.at(gi.index) = spec_of(spec.constant_names[gi.index], fake, dyn);
    } else {
      m.inputs.at(gi.index) = spec_of(spec.input_names[gi.index], fake, dyn);
      if (size_t(gi.index) < spec.input_specs.size()) m.inputs.at(gi.index).ranges = spec.input_specs[gi.index].ranges;
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  // Lowered as the device's backend lowers it (cuda: linear chains as cuBLASLt library calls).
  LibraryCalls calls;
  lower::LoweredGraph lg;
  if (cuda) {
#ifdef TC_HAVE_CUDA
    lg = backends::lower_for_cuda(rg);
    calls = backends::cuda::library_call;
#endif
  } else {
    lower::LowerOptions lo;
    lo.externals = false;  // a package cannot call Lua functions
    lg = lower::lower(rg, lo);
  }
  r.lower_ms = ms_since(t0);
  capture::CompileReport cr;
  std::vector<Section> code_sections;
  std::vector<nlohmann::json> kernel_code;
  nlohmann::json graph_code;
  if (cuda) {
#ifdef TC_HAVE_CUDA
    int arch = o.arch;
    if (arch <= 0) arch = tc::cuda::device_count() > 0 ? backends::cuda::device_arch(0) : 90;
    backends::cuda::CudaCode cc = backends::cuda::generate_code(lg, arch, &cr);
    m.target = "sm_" + std::to_string(arch);
    for (size_t i = 0; i < lg.kernels.size(); i++) kernel_code.push_back(backends::cuda::kernel_code_to_json(cc, i));
    graph_code = backends::cuda::code_to_json(cc);
    for (size_t i = 0; i < cc.cubins.size(); i++) code_sections.push_back({"cuda.cubin." + std::to_string(i), std::move(cc.cubins[i])});
#else
    TC_FAIL(NotImplementedError, "tc.aot.compile: this tc was built without the CUDA toolkit: no device \"cuda\" packages");
#endif
  } else {
    backends::cpu::ObjectCode oc = backends::cpu::compile_object(lg, &cr);
    m.target = target_of_host();
    for (const std::string& sym : oc.symbols) kernel_code.push_back({{"symbol", sym}});
    if (!oc.symbols.empty()) code_sections.push_back({"cpu.o", std::move(oc.object)});
  }
  r.codegen_ms = cr.codegen_ms;
  r.compile_ms = cr.compile_ms;
  for (const lower::Step& s : lg.steps) (s.kind == lower::Step::Kind::Launch ? r.kernels : r.externs)++;
  if (cuda) r.kernels = cr.kernels;  // launches per call: a tiny graph's is one
  r.distinct_kernels = cr.distinct_kernels;
  for (size_t i = 0; i < g.outputs.size(); i++) {
    std::vector<int> dyn;
    const lower::BufferView& v = lg.outputs[i];
    for (size_t d = 0; d < v.sizes.size(); d++)
      if (!v.sizes[d].is_const()) dyn.push_back((int)d);
    m.outputs.push_back(spec_of("output " + std::to_string(i + 1), rg.fake(rg.outputs[i]), dyn));
  }
  auto t1 = std::chrono::steady_clock::now();
  std::vector<Section> sections;
  sections.push_back({"manifest", manifest_to_json(m).dump(1)});
  sections.push_back({"plan", plan_to_json(lg, spec.graph_inputs, kernel_code, graph_code, calls).dump()});
  for (Section& c : code_sections) sections.push_back(std::move(c));
  if (o.package_constants) {
    std::string blob;
    for (size_t i = 0; i < m.constants.size(); i++) {
      const Tensor& t = spec.constant_values.at(i);
      TC_CHECK(t.defined(), ValueError, "tc.aot.compile: constant '%s' has no value", m.constants[i].name.c_str());
      Tensor c = t.device().is_cpu() ? t.contiguous() : call1(Op::to_device, {Value(t), Value(Device{})}).contiguous();
      blob.resize((blob.size() + 63) / 64 * 64, '\0');
      blob.append(static_cast<const char*>(c.data_ptr()), (size_t)c.numel() * itemsize(c.dtype()));
    }
    sections.push_back({"constants", std::move(blob)});
  }
  for (const Section& s : sections) r.bytes += s.data.size();
  write_container(o.path, sections);
  r.write_ms = ms_since(t1);
  return r;
}

}  // namespace tc::aot
