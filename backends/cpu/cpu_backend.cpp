// The "cpu" backend (cpu_backend.h): lower, generate, and fall back to eager on failure.
#include "cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <future>
#include <mutex>
#include <optional>
#include <set>

#include "compile.h"
#include "disk_cache.h"
#include "eager/eager.h"
#include "jit.h"
#include "lower/launch_list.h"
#include "lower/lower.h"
#include "plan_cache.h"
#include "tc/config.h"
#include "tc/error.h"

namespace tc::backends {

bool on_cpu(const capture::Node& n) {
  for (const Value& v : n.fakes) {
    if (v.is_tensor() && !v.tensor().device().is_cpu()) return false;
    if (v.is_tensor_list())
      for (const Tensor& t : v.tensors())
        if (!t.device().is_cpu()) return false;
  }
  return true;
}

bool all_on_cpu(const capture::Graph& g) {
  return std::all_of(g.nodes.begin(), g.nodes.end(), [](const capture::Node& n) { return on_cpu(n); });
}

namespace {

// The process's first graph starts LLVM's JIT (~7-14 ms on the dev VM) on another thread while
// this one lowers the graph (the 64-layer seed model: ~20-60 ms), so a warm start from the disk
// cache does not wait for both. The future's destructor waits for it, so the thread never outlives
// the compile (nor runs into exit); a failure there is retried, and reported, by the compile.
std::future<void> start_jit_early() {
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return {};
  return std::async(std::launch::async, [] {
    try {
      cpu::Jit::get();
    } catch (...) {
    }
  });
}

// The plan cache's key, or "" when the disk cache is off, the graph's plan is not stored, or
// TC_DEBUG >= 2 asks for lowering's stages to be printed (so lowering must run).
std::string plan_key_of(const capture::Graph& g) {
  if (cpu::cache_dir().empty() || tc::debug_level() >= 2) return "";
  return cpu::plan_key(g);
}

}  // namespace

Compiled CpuBackend::compile(const capture::Graph& g, const CompileOptions& o) const {
  auto t0 = std::chrono::steady_clock::now();
  Compiled c;
  try {
    TC_CHECK(all_on_cpu(g), DeviceError, "the graph has tensors on another device than the CPU");
    std::future<void> jit_started = start_jit_early();
    // A warm start reads the lowered graph from the disk cache (plan_cache.h) instead of lowering.
    const std::string key = plan_key_of(g);
    bool rejected = false;
    std::optional<lower::LoweredGraph> stored = key.empty() ? std::nullopt : cpu::read_plan(key, &rejected);
    cpu::count_plan(stored.has_value(), rejected);
    c.report.cached_plans = stored.has_value();
    lower::LoweredGraph lg;
    if (stored) {
      lg = std::move(*stored);
    } else {
      lower::LowerOptions lo;
      lo.externals = true;  // the runtime calls functions kept in the graph and index checks
      lg = lower::lower(g, lo);
    }
    c.report.lower_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    auto program = std::make_shared<const cpu::Program>(cpu::compile_lowered(lg, &c.report));
    if (!stored) cpu::write_plan(key, lg);  // once its kernels compiled
    for (const lower::Step& s : lg.steps)
      c.report.fallback_nodes += s.kind == lower::Step::Kind::Extern && s.ext.fallback;
    c.report.perf_hints.insert(c.report.perf_hints.end(), lg.perf_hints.begin(), lg.perf_hints.end());
    cpu::count_graph(false, c.report.lower_ms / 1e3);
    if (lg.tied.empty()) {
      c.run = [program](capture::GraphInputs inputs) { return program->run(inputs); };
    } else {  // dims that shared a size when lowered: a call where they differ runs on eager
      auto eager = std::make_shared<capture::CompiledGraph>(EagerBackend().compile(g, o).run);
      c.run = [program, eager](capture::GraphInputs inputs) {
        if (!lower::ties_hold(program->graph, inputs)) return (*eager)(inputs);
        return program->run(inputs);
      };
    }
    return c;
  } catch (const std::exception& e) {  // tc::Error, and anything else a bug in lowering throws
    cpu::count_graph(true, c.report.lower_ms / 1e3);
    if (o.fullgraph) TC_FAIL(CompileError, "the cpu backend cannot compile this graph (fullgraph=true): %s", e.what());
    // One warning per distinct reason: 64 identical layers falling back say it once.
    static std::mutex mu;
    static std::set<std::string> said;
    std::lock_guard<std::mutex> lock(mu);
    if (said.insert(e.what()).second)
      std::fprintf(stderr, "tc: cpu backend: running a graph on the eager backend: %s\n", e.what());
    std::string hint = std::string("cpu backend: ") + e.what() + ": the graph runs on eager";
    c = EagerBackend().compile(g, o);
    c.report.fallback_nodes += g.num_ops();
    c.report.perf_hints.push_back(hint);
    return c;
  }
}

}  // namespace tc::backends
