// A backend for tests of the plumbing around code generators: it supports only the ops it is
// given, runs what it compiles on eager, records every graph and options it received, and
// reports one "kernel" per op node.
#pragma once
#include <set>

#include "eager/eager.h"
#include "tc/backends.h"

namespace tc::backends::testing {

class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(std::set<Op> ops, std::vector<std::string> options = {})
      : ops_(std::move(ops)), options_(std::move(options)) {}
  // Like a code generator: every result in a new buffer (a view's result aliases nothing).
  bool fresh_outputs = false;
  const char* name() const override { return "fake"; }
  bool supports(const capture::Node& n) const override {
    return n.kind == capture::NodeKind::Op && ops_.count(n.op);
  }
  std::vector<std::string> option_names() const override { return options_; }
  Compiled compile(const capture::Graph& g, const CompileOptions& o) const override {
    for (const capture::Node& n : g.nodes)
      if (n.kind != capture::NodeKind::Input && !supports(n))
        ADD_FAILURE() << "the fake backend was given " << n.target() << ", which it does not support";
    graphs.push_back(g.op_names());
    options.push_back(o);
    Compiled c = EagerBackend().compile(g, o);
    if (fresh_outputs)
      c.run = [run = c.run](capture::GraphInputs in) {
        std::vector<Tensor> outs = run(in);
        for (Tensor& t : outs) t = t.clone();
        return outs;
      };
    c.report.kernels = g.num_ops();
    c.report.distinct_kernels = 1;
    c.report.lower_ms = 1.5;
    return c;
  }
  mutable std::vector<std::vector<std::string>> graphs;  // op names of each compiled graph
  mutable std::vector<CompileOptions> options;

 private:
  std::set<Op> ops_;
  std::vector<std::string> options_;
};

}  // namespace tc::backends::testing
