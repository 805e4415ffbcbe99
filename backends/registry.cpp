// The backend registry: one explicit list, no static constructors. It is also the only list of
// backend names and mode names: tcrun, capture and the Lua side ask it (graph_compiler()).
#include <algorithm>
#include <string_view>

#include "cpu/cpu_backend.h"
#if TC_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif
#include "cuda/cuda_graphs.h"
#include "cuda/host_scalars.h"
#include "eager/eager.h"
#include "lower/loopir_backend.h"
#include "partitioned.h"
#include "tc/error.h"

namespace tc::backends {
namespace {

// The first node whose tensors are on another device than the graph's first tensor: "%name
// (target) on cpu, %x on cuda:0" (TC_LOGS=perf_hints shows why a graph runs on eager).
std::string mixed_device_node(const capture::Graph& g) {
  const capture::Node* first = nullptr;
  Device d;
  for (const capture::Node& n : g.nodes)
    for (const Value& v : n.fakes) {
      TensorList ts = v.is_tensor() ? TensorList{v.tensor()} : v.is_tensor_list() ? v.tensors() : TensorList{};
      for (const Tensor& t : ts) {
        if (!t.defined()) continue;
        if (!first) first = &n, d = t.device();
        if (t.device() != d)
          return "%" + n.name + " (" + (n.kind == capture::NodeKind::Input ? n.source : n.target()) + ") on " +
                 t.device().str() + ", %" + first->name + " on " + d.str();
      }
    }
  return "no tensors";
}

// "tc": the code generator of the graph's device: cpu for graphs whose tensors are all on the CPU,
// cuda for graphs whose tensors are all on one CUDA device, eager otherwise (mixed devices).
class TcBackend final : public Backend {
 public:
  TcBackend(const Backend& cpu, const Backend& cuda, const Backend& other) : cpu_(cpu), cuda_(cuda), other_(other) {}
  const char* name() const override { return "tc"; }
  bool supports(const capture::Node& n) const override { return on_cpu(n) ? cpu_.supports(n) : cuda_.supports(n); }
  Compiled compile(const capture::Graph& g, const CompileOptions& o) const override {
    if (all_on_cpu(g)) return cpu_.compile(g, o);
#if TC_HAVE_CUDA
    if (cuda_device_of(g) >= 0) return cuda_.compile(g, o);
#endif
    Compiled c = other_.compile(g, o);
    c.report.perf_hints.push_back("tc backend: the graph runs on eager: its tensors are not on one device (" +
                                  mixed_device_node(g) + ")");
    return c;
  }

 private:
  const Backend& cpu_;
  const Backend& cuda_;
  const Backend& other_;
};

struct Entry {
  const char* name;
  const Backend* backend;
};

const std::vector<Entry>& registry() {
  static const EagerBackend eager;
  static const LoopIRBackend loopir;  // debug: lowering + the loop-IR interpreter
  static const CpuBackend cpu;
#if TC_HAVE_CUDA
  static const CudaBackend cuda;
#else
  static const EagerBackend& cuda = eager;  // built without the CUDA toolkit
#endif
  static const TcBackend tc(cpu, cuda, eager);
  // "inductor" (torch.compile's default name) is "tc": the code generator of the graph's device.
  static const std::vector<Entry> list = {
      {"eager", &eager}, {"tc", &tc},       {"inductor", &tc}, {"cpu", &cpu},
      {"cuda", &cuda},   {"loopir", &loopir}};
  return list;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

}  // namespace

const Backend& find(const std::string& name) {
  for (const Entry& e : registry())
    if (name == e.name) return *e.backend;
  TC_FAIL(ValueError, "unknown backend \"%s\" (backends: %s)", name.c_str(),
          joined(names()).c_str());
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const Entry& e : registry()) out.push_back(e.name);
  return out;
}

const std::vector<std::string>& modes() {
  static const std::vector<std::string> list = {"default", "reduce-overhead", "max-autotune",
                                                "max-autotune-no-cudagraphs"};
  return list;
}

Compiled compile_graph(const capture::Graph& g, const std::string& backend,
                       const CompileOptions& o) {
  const Backend& b = find(backend);
  TC_CHECK(std::ranges::find(modes(), o.mode) != modes().end(), ValueError,
           "unknown mode \"%s\" (modes: %s)", o.mode.c_str(), joined(modes()).c_str());
  const std::vector<std::string> known = b.option_names();
  for (const auto& [key, value] : o.options)
    TC_CHECK(std::ranges::find(known, key) != known.end(), ValueError,
             "backend \"%s\" has no option '%s' (its options: %s)", backend.c_str(), key.c_str(),
             joined(known).c_str());
  // every backend's GPU graphs replay as CUDA graphs under these modes (cuda/cuda_graphs.h; as
  // torch, "max-autotune" also uses them, "max-autotune-no-cudagraphs" does not)
  const bool cuda_graphs = o.mode == "reduce-overhead" || o.mode == "max-autotune";
  // 0-dim CPU inputs of a GPU graph (a Lua number as an input, an optimizer's lr) go to the GPU
  // (cuda/host_scalars.h) where that lets the graph compile for it or record into CUDA graphs;
  // eager alone takes them as they are
  HostScalars hs;
  if (cuda_graphs || std::string_view(b.name()) != "eager") hs = host_scalar_inputs(g);
  const capture::Graph& graph = hs.inputs.empty() ? g : hs.graph;
  Compiled c = compile_partitioned(b, find("eager"), graph, o);
  if (cuda_graphs) c = with_cuda_graphs(std::move(c), graph, o);
  if (!hs.inputs.empty()) c = with_host_scalars(std::move(c), hs, cuda_graphs);
  return c;
}

capture::GraphCompiler graph_compiler() {
  capture::GraphCompiler c;
  c.compile = [](const capture::Graph& g, const std::string& backend, const CompileOptions& o) {
    return compile_graph(g, backend, o);
  };
  for (const Entry& e : registry()) c.backends.emplace_back(e.name, e.backend->option_names());
  c.modes = modes();
  return c;
}

}  // namespace tc::backends
