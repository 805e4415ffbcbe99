// Capture's cost of a cache hit as a C++ backend sees it (a benchmark, not a test): guard check,
// dispatch, handing the graph its inputs and the caller its outputs. The graph compiler installed
// here runs the real eager graph once and then returns those outputs, so no op runs in the
// timed calls. Peer in the same run: the same model's call with the guards' fast path off
// (TC_GUARD_FASTPATH=0 semantics, the full check). Run from the repository root:
//   build/bench/bench_capture_dispatch          (the table)
//   build/bench/bench_capture_dispatch 64 N     (N fast-path hits at 64 layers, for a profiler)
#include <cstdio>
#include <memory>
#include <string>

#include "tc/backends.h"
#include "tc/capture.h"
#include "tc/vm/runtime.h"

int main(int argc, char** argv) {
  tc::vm::Runtime rt("bench_capture_dispatch");
  tc::capture::GraphCompiler compiler = tc::backends::graph_compiler();
  compiler.compile = [](const tc::capture::Graph& g, const std::string&,
                        const tc::capture::CompileOptions&) {
    tc::capture::CompiledGraph real = tc::backends::compile_graph(g, "eager").run;
    auto outs = std::make_shared<std::vector<tc::Tensor>>();
    return tc::capture::Compiled{[real, outs](tc::capture::GraphInputs in) {
      if (outs->empty()) *outs = real(in);
      return *outs;
    }, {}};
  };
  tc::capture::install(rt.state(), compiler);
  if (argc > 1) {
    rt.run_string(std::string("LAYERS, N = ") + argv[1] + ", " + (argc > 2 ? argv[2] : "100000"));
    rt.run_string(R"LUA(
      package.path = "scripts/models/?.lua;" .. package.path
      local tc = require "tc"
      local cm = tc.compile(require("seed_layers").Model({num_layers = LAYERS}))
      local x = tc.randn(10, 10)
      for _ = 1, N do cm(x) end
    )LUA");
    return 0;
  }
  rt.run_string(R"LUA(
    package.path = "scripts/models/?.lua;" .. package.path
    local tc = require "tc"
    local seed = require "seed_layers"
    local function per_call_us(f, n, ...)
      for _ = 1, 3 do f(...) end
      local best = math.huge
      for _ = 1, 7 do
        local t0 = tc.utils.perf_counter()
        for _ = 1, n do f(...) end
        best = math.min(best, (tc.utils.perf_counter() - t0) / n * 1e6)
      end
      return best
    end
    local x = tc.randn(10, 10)
    print("cache hit of the seed model compiled whole, C++ backend replaying its outputs (us per call)")
    print(("%-8s %10s %12s"):format("layers", "tc", "full check"))
    for _, layers in ipairs {16, 64, 256} do
      local n = layers <= 64 and 20000 or 4000
      tc.compiler.reset()
      local cm = tc.compile(seed.Model({num_layers = layers}))
      local fast = per_call_us(cm, n, x)
      tc.compiler.reset()
      tc.compiler._set_guard_fast_path(false)
      cm = tc.compile(seed.Model({num_layers = layers}))
      local full = per_call_us(cm, n, x)
      tc.compiler._set_guard_fast_path(true)
      print(("%-8d %10.2f %12.2f"):format(layers, fast, full))
    end
    tc.compiler.reset()
    local foo = tc.compile(function(a, b) return tc.sin(a) + tc.cos(b) end)
    print(("%-8s %10.2f"):format("foo", per_call_us(foo, 200000, x, x)))
  )LUA");
  return 0;
}
