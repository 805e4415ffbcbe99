// embed_example: a C++ program that embeds tc's Lua runtime (vm/include/tc/vm/runtime.h) with its
// compiler (tc/vm/compiler.h). It defines a small Lua model, feeds it a tensor made from host
// memory, reads the results back, runs the model through tc.compile (and checks that it really
// compiled), lets Lua call a C++ function, and shows a Lua error arriving as a C++ exception.
// Build in the tree: scripts/dev/build.sh --target embed_example; run: ./build/embed_example.
// Outside it, against an installed tc (README.md, "Embedding tc in a C++ program"):
//   c++ -std=c++20 embed_example.cpp $(pkg-config --cflags --libs tc) -o embed_example
// or CMake's find_package(tc) and target_link_libraries(app PRIVATE tc::tc).
#include <cstdio>

#include "tc/vm/compiler.h"
#include "tc/vm/runtime.h"

using namespace tc::vm;

static const char* kModel = R"(
local tc = require "tc"
local M = {}
-- a two-layer perceptron with fixed weights, so the output is checkable
M.w1 = tc.tensor({{1, 0, -1}, {0.5, 0.5, 0.5}})   -- 2x3
M.w2 = tc.tensor({{1.0}, {2.0}, {3.0}})           -- 3x1
function M.forward(x)                             -- x: n x 2
  local h = x:matmul(M.w1):relu()
  return h:matmul(M.w2), h:sum():item()
end
function M.predict(x) return x:matmul(M.w1):relu():matmul(M.w2) end
function M.report(x)
  return host_describe(x)                         -- a C++ function registered by the host
end
return M
)";

int main() {
  Runtime rt;
  install_compiler(rt);  // tc.compile as under tcrun; without it, functions run uncompiled
  Ref model = rt.run_string(kModel, "=model")[0];

  // Host memory in, tensors out.
  float input[4] = {1, 2, 3, 4};  // 2x2
  tc::Tensor x = from_host(input, {2, 2}, tc::DType::Float32);
  Results r = model["forward"](x);
  tc::Tensor y = r[0].tensor();
  float out[2];
  to_host(y, out, sizeof out);
  std::printf("forward: [%g, %g], hidden sum %g\n", out[0], out[1], r[1].number());

  // A borrowed tensor reads the host buffer itself: later writes are seen.
  float buf[4] = {1, 0, 0, 0};
  tc::Tensor b = borrow_host(buf, {2, 2}, tc::DType::Float32);
  double s1 = model["forward"](b)[1].number();
  buf[0] = 2;
  double s2 = model["forward"](b)[1].number();
  std::printf("borrowed: hidden sums %g then %g\n", s1, s2);

  // The model's output through tc.compile: traced into one graph, generated code on the first call.
  Ref compile = rt.run_string("return function(f) return require('tc').compile(f, {fullgraph = true}) end", "=compile")[0];
  Ref fast = compile(model["predict"])[0];
  float cout[2];
  to_host(fast(x)[0].tensor(), cout, sizeof cout);
  Ref stats = rt.run_string("return require('tc').compiler.stats()", "=stats")[0];
  int64_t compiles = stats["backend_compiles"].integer();
  std::printf("compiled: [%g, %g], %lld graph(s) compiled\n", cout[0], cout[1], (long long)compiles);

  // C++ called from Lua.
  rt.register_function("host_describe", [](const Values& a) -> Values {
    const tc::Tensor& t = a.at(0).tensor();
    return {std::string("a tensor of ") + std::to_string(t.numel()) + " elements", t.dim()};
  });
  Results d = model["report"](x);
  std::printf("report: %s (dim %lld)\n", d[0].string().c_str(), (long long)d[1].integer());

  // A Lua error is a C++ exception with the message (user's line), kind and traceback.
  try {
    model["forward"](tc::Tensor::empty({2, 5}, tc::DType::Float32));
  } catch (const LuaError& e) {
    std::printf("error: %s [%s]\n", e.what(), e.kind().c_str());
  }
  bool ok = out[0] == 4 && out[1] == 9 && r[1].number() == 10 && s1 == 1 && s2 == 2 && cout[0] == 4 &&
            cout[1] == 9 && compiles > 0;
  std::printf("%s\n", ok ? "ok" : "WRONG RESULTS");
  return ok ? 0 : 1;
}
