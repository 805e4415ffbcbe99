// An exported graph to a package file (compile.h).
#include "compile.h"

#include <chrono>

#include "container.h"
#include "cpu/package.h"
#include "lower/lower.h"
#include "tc/error.h"

namespace tc::aot {

std::string target_of_host();  // package.cpp

namespace {

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

}  // namespace

AotReport compile_package(const capture::Graph& g, const ExportSpec& spec, const AotOptions& o) {
  TC_CHECK(o.device == "cpu" || o.device == "cuda", ValueError,
           "tc.aot.compile: device must be \"cpu\" or \"cuda\", got \"%s\"", o.device.c_str());
  TC_CHECK(!o.path.empty(), ValueError, "tc.aot.compile: no path given (opts.path = \"model.tcpkg\")");
  TC_CHECK(spec.graph_inputs.size() == g.inputs.size(), ValueError,
           "tc.aot.compile: the export names %zu graph inputs, the graph has %zu", spec.graph_inputs.size(),
           g.inputs.size());
  TC_CHECK(o.device == "cpu", NotImplementedError,
           "tc.aot.compile: device \"cuda\" packages are not implemented yet (use device = \"cpu\")");
  AotReport r;
  Manifest m;
  m.tc_version = TC_VERSION;
  m.device = o.device;
  m.target = target_of_host();
  m.code = g.print_code();
  m.constants_packaged = o.package_constants;
  m.inputs.resize(spec.input_names.size());
  m.constants.resize(spec.constant_names.size());
  for (size_t i = 0; i < g.inputs.size(); i++) {
    const Tensor& fake = g.nodes[g.inputs[i]].fakes.at(0).tensor();
    TC_CHECK(fake.device().is_cpu(), DeviceError,
             "tc.aot.compile: graph input '%s' is on %s; a device \"%s\" package takes CPU tensors",
             g.nodes[g.inputs[i]].source.c_str(), fake.device().str().c_str(), o.device.c_str());
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
    }
  }
  auto t0 = std::chrono::steady_clock::now();
  lower::LowerOptions lo;
  lo.externals = false;  // a package cannot call Lua functions
  lower::LoweredGraph lg = lower::lower(g, lo);
  r.lower_ms = ms_since(t0);
  capture::CompileReport cr;
  backends::cpu::ObjectCode oc = backends::cpu::compile_object(lg, &cr);
  r.codegen_ms = cr.codegen_ms;
  r.compile_ms = cr.compile_ms;
  r.distinct_kernels = (int)lg.kernels.size();
  for (const lower::Step& s : lg.steps) (s.kind == lower::Step::Kind::Launch ? r.kernels : r.externs)++;
  for (size_t i = 0; i < g.outputs.size(); i++) {
    std::vector<int> dyn;
    const lower::BufferView& v = lg.outputs[i];
    for (size_t d = 0; d < v.sizes.size(); d++)
      if (!v.sizes[d].is_const()) dyn.push_back((int)d);
    m.outputs.push_back(spec_of("output " + std::to_string(i + 1), g.fake(g.outputs[i]), dyn));
  }
  auto t1 = std::chrono::steady_clock::now();
  std::vector<Section> sections;
  sections.push_back({"manifest", manifest_to_json(m).dump(1)});
  sections.push_back({"plan", plan_to_json(lg, spec.graph_inputs, oc.symbols).dump()});
  if (!oc.symbols.empty()) sections.push_back({"cpu.o", std::move(oc.object)});
  if (o.package_constants) {
    std::string blob;
    for (size_t i = 0; i < m.constants.size(); i++) {
      const Tensor& t = spec.constant_values.at(i);
      TC_CHECK(t.defined() && t.device().is_cpu(), ValueError, "tc.aot.compile: constant '%s' has no CPU value",
               m.constants[i].name.c_str());
      Tensor c = t.contiguous();
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
