// Test helpers for lowering: build captured graphs the way capture does (ops bound, meta rules
// run on fakes) while keeping real example inputs, then compare the loop-IR interpreter with eager.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <unordered_map>

#include "../../backends/lower/lower.h"
#include "tc/backends.h"
#include "tc/capture/graph.h"

namespace tc::testing {

using KW = std::vector<std::pair<std::string, Value>>;

// A graph under construction: in() adds an input (real tensor kept), op() an op node on fakes.
struct GraphBuilder {
  capture::Graph g;
  std::vector<Tensor> inputs;
  std::unordered_map<const TensorImpl*, capture::Ref> refs;

  Tensor in(const Tensor& real, bool dynamic0 = false) {
    Tensor f = Tensor::fake(real.sizes(), real.strides(), real.dtype());
    refs[f.impl()] = g.add_input("x", "arg[" + std::to_string(inputs.size() + 1) + "]", f);
    if (dynamic0) g.dynamic_dims.push_back({int(inputs.size()), 0});
    inputs.push_back(real);
    return f;
  }
  capture::NodeArg arg(const Value& v) {
    if (v.is_tensor() && refs.count(v.tensor().impl())) return capture::NodeArg::ref(refs[v.tensor().impl()]);
    if (v.is_tensor_list() && !v.tensors().empty()) {
      std::vector<capture::Ref> rs;
      for (const Tensor& t : v.tensors()) rs.push_back(refs.at(t.impl()));
      return capture::NodeArg::list(rs);
    }
    return capture::NodeArg::constant_of(v);
  }
  Stack ops(Op o, Stack positional, KW kw = {}) {
    Stack args = bind(o, std::move(positional), std::move(kw));
    std::vector<capture::NodeArg> nargs;
    for (const Value& v : args) nargs.push_back(arg(v));
    Stack fakes = call(o, args);
    std::vector<capture::Ref> rs = g.add_op(o, std::move(nargs), fakes, 7);
    size_t k = 0;
    for (const Value& v : fakes) {
      if (v.is_tensor()) refs[v.tensor().impl()] = rs[k++];
      if (v.is_tensor_list())
        for (const Tensor& t : v.tensors()) refs[t.impl()] = rs[k++];
    }
    return fakes;
  }
  Tensor op(Op o, Stack positional, KW kw = {}) { return ops(o, std::move(positional), std::move(kw))[0].tensor(); }
  void out(const Tensor& t) { g.outputs.push_back(refs.at(t.impl())); }
};

inline Tensor randn(Shape s, DType d = DType::Float32) {
  Tensor t = call1(Op::randn, {IntList(s.begin(), s.end())});
  return d == DType::Float32 ? t : call1(Op::to_dtype, {t, d});
}

inline std::vector<Tensor> eager(const capture::Graph& g, const std::vector<Tensor>& in) {
  return backends::find("eager").compile(g, {}).run(capture::borrow(in));
}

// Max |a - b| / (atol + rtol |b|) over the elements (NaNs must match); <= 1 passes.
inline double closeness(const Tensor& a, const Tensor& b, double atol, double rtol) {
  Tensor x = call1(Op::to_dtype, {a, DType::Float64}).contiguous();
  Tensor y = call1(Op::to_dtype, {b, DType::Float64}).contiguous();
  if (x.sizes() != y.sizes()) return INFINITY;
  double worst = 0;
  for (int64_t i = 0; i < x.numel(); i++) {
    double p = x.data<double>()[i], q = y.data<double>()[i];
    if (std::isnan(p) || std::isnan(q)) {
      if (std::isnan(p) != std::isnan(q)) return INFINITY;
      continue;
    }
    if (p == q) continue;
    worst = std::max(worst, std::fabs(p - q) / (atol + rtol * std::fabs(q)));
  }
  return worst;
}

// The 10-op pointwise chain of issue 11's fusion test, with a broadcast row: x[33, 17], y[17].
inline void ten_op_chain(GraphBuilder& b) {
  Tensor x = b.in(randn({33, 17})), y = b.in(randn({17}));
  Tensor t = b.op(Op::add, {x, y});
  t = b.op(Op::mul, {t, 2.0});
  t = b.op(Op::sin, {t});
  t = b.op(Op::exp, {t});
  t = b.op(Op::sub, {t, y});
  t = b.op(Op::relu, {t});
  t = b.op(Op::sigmoid, {t});
  t = b.op(Op::tanh, {t});
  t = b.op(Op::div, {t, 3.0});
  t = b.op(Op::gelu, {t});
  b.out(t);
}

// What the loopir backend lowers with: the interpreter calls functions (index checks).
inline lower::LowerOptions loopir_options() {
  lower::LowerOptions o;
  o.externals = true;
  return o;
}

// Lowers the graph, runs it on the interpreter and on eager, and expects equal results.
inline lower::LoweredGraph expect_matches_eager(GraphBuilder& b, double atol = 1e-5, double rtol = 1e-4,
                                                const lower::LowerOptions& o = loopir_options()) {
  lower::LoweredGraph lg = lower::lower(b.g, o);
  std::vector<Tensor> got = lower::run(lg, b.inputs), want = eager(b.g, b.inputs);
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size() && i < want.size(); i++) {
    EXPECT_EQ(got[i].sizes(), want[i].sizes()) << "output " << i << "\n" << b.g.print_code();
    EXPECT_EQ(got[i].dtype(), want[i].dtype()) << "output " << i << "\n" << b.g.print_code();
    bool low = want[i].dtype() == DType::Float16 || want[i].dtype() == DType::BFloat16;
    EXPECT_LE(closeness(got[i], want[i], low ? 1e-2 : atol, low ? 1e-2 : rtol), 1.0)
        << "output " << i << "\n" << b.g.print_code() << lower::print(lg);
  }
  return lg;
}

}  // namespace tc::testing
