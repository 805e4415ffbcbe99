// The partitioner and compile_partitioned: a graph is cut into maximal runs of nodes the backend
// supports and runs it does not; the pieces run in order give eager's results, the unsupported
// nodes are counted and hinted one by one, and the backend never sees a node it does not support.
#include <gtest/gtest.h>

#include <variant>

#include "infra_fake_backend.h"
#include "graph_node.h"
#include "lower/partition.h"
#include "partitioned.h"

using namespace tc;
using namespace tc::capture;
using tc::backends::testing::node;
using tc::backends::testing::FakeBackend;

namespace {

Ref unary(Graph& g, Op op, Ref x) { return node(g, op, {x})[0]; }
Ref binary(Graph& g, Op op, Ref a, Ref b) { return node(g, op, {a, b})[0]; }

Tensor fake(Shape s) { return Tensor::fake(s, contiguous_strides(s), DType::Float32); }

Tensor values(Shape s, double start) {
  Tensor t = Tensor::empty(s, DType::Float32);
  for (int64_t i = 0; i < t.numel(); i++) t.data<float>()[i] = float(start + 0.25 * double(i));
  return t;
}

// y = exp(cos(relu(sin(x)))) + x, relu unsupported: [sin] [relu] [cos exp add]
Graph chain(Ref* x_out = nullptr) {
  Graph g;
  Ref x = g.add_input("x", "arg[1]", fake({3, 5}));
  Ref s = unary(g, Op::sin, x);
  Ref r = unary(g, Op::relu, s);
  Ref c = unary(g, Op::cos, r);
  Ref e = unary(g, Op::exp, c);
  g.outputs.push_back(binary(g, Op::add, e, x));
  g.outputs.push_back(s);
  if (x_out) *x_out = x;
  return g;
}

void expect_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); i++) {
    ASSERT_EQ(a[i].sizes(), b[i].sizes()) << "output " << i;
    Tensor x = a[i].contiguous(), y = b[i].contiguous();
    for (int64_t k = 0; k < x.numel(); k++)
      ASSERT_EQ(x.data<float>()[k], y.data<float>()[k]) << "output " << i << " element " << k;
  }
}

std::vector<Tensor> eager(const Graph& g, const std::vector<Tensor>& in) {
  return backends::compile_graph(g, "eager").run(borrow(in));
}

}  // namespace

TEST(Partition, CutsMaximalRunsInNodeOrder) {
  Ref x;
  Graph g = chain(&x);
  auto parts = lower::partition(g, [](const Node& n) { return n.op != Op::relu; });
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_TRUE(parts[0].supported);
  EXPECT_FALSE(parts[1].supported);
  EXPECT_TRUE(parts[2].supported);
  EXPECT_EQ(parts[0].graph.op_names(), (std::vector<std::string>{"sin"}));
  EXPECT_EQ(parts[1].graph.op_names(), (std::vector<std::string>{"relu"}));
  EXPECT_EQ(parts[2].graph.op_names(), (std::vector<std::string>{"cos", "exp", "add"}));
  // sin's result is read by relu and is a graph output: one output of the first run
  EXPECT_EQ(parts[0].inputs, (std::vector<Ref>{x}));
  EXPECT_EQ(parts[0].outputs.size(), 1u);
  // the last run reads relu's result and the graph input x, and makes the first graph output
  EXPECT_EQ(parts[2].inputs.size(), 2u);
  EXPECT_EQ(parts[2].inputs[1], x);
  EXPECT_EQ(parts[2].outputs, (std::vector<Ref>{g.outputs[0]}));
  EXPECT_EQ(parts[2].graph.inputs.size(), 2u);
  EXPECT_EQ(parts[2].graph.nodes[parts[2].graph.inputs[1]].source, "arg[1]");
}

TEST(Partition, AllSupportedIsOneRunAndNoneSupportedIsOneRun) {
  Graph g = chain();
  auto all = lower::partition(g, [](const Node&) { return true; });
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].graph.num_ops(), g.num_ops());
  EXPECT_EQ(all[0].outputs, g.outputs);
  auto none = lower::partition(g, [](const Node&) { return false; });
  ASSERT_EQ(none.size(), 1u);
  EXPECT_FALSE(none[0].supported);
}

TEST(Partition, DynamicDimsFollowInputsAndSameSizedIntermediates) {
  Graph g = chain();
  g.dynamic_dims.push_back({0, 1});  // x's dim of size 5
  auto parts = lower::partition(g, [](const Node& n) { return n.op != Op::relu; });
  EXPECT_EQ(parts[0].graph.dynamic_dims, (std::vector<std::pair<int, int>>{{0, 1}}));
  // relu reads sin's result [3, 5]: its dim of size 5 stays symbolic
  EXPECT_EQ(parts[1].graph.dynamic_dims, (std::vector<std::pair<int, int>>{{0, 1}}));
}

TEST(CompilePartitioned, GivesEagerResultsAndCountsFallbackNodes) {
  Graph g = chain();
  FakeBackend fake({Op::sin, Op::cos, Op::exp, Op::add});
  backends::CompileOptions o;
  o.mode = "max-autotune";
  Compiled c = backends::compile_partitioned(fake, backends::find("eager"), g, o);
  std::vector<Tensor> in{values({3, 5}, -2)};
  expect_equal(c.run(borrow(in)), eager(g, in));
  EXPECT_EQ(c.report.fallback_nodes, 1);
  ASSERT_EQ(c.report.perf_hints.size(), 1u);
  EXPECT_NE(c.report.perf_hints[0].find("does not support relu"), std::string::npos)
      << c.report.perf_hints[0];
  // the fake compiled the two supported runs, with the options given, and reported them
  EXPECT_EQ(fake.graphs, (std::vector<std::vector<std::string>>{{"sin"}, {"cos", "exp", "add"}}));
  ASSERT_EQ(fake.options.size(), 2u);
  EXPECT_EQ(fake.options[1].mode, "max-autotune");
  EXPECT_EQ(c.report.kernels, 4);
  EXPECT_EQ(c.report.distinct_kernels, 2);
  EXPECT_DOUBLE_EQ(c.report.lower_ms, 3.0);
}

TEST(CompilePartitioned, WholeGraphGoesToTheBackendWhenAllIsSupported) {
  Graph g = chain();
  FakeBackend fake({Op::sin, Op::relu, Op::cos, Op::exp, Op::add});
  Compiled c = backends::compile_partitioned(fake, backends::find("eager"), g, {});
  EXPECT_EQ(fake.graphs.size(), 1u);
  EXPECT_EQ(c.report.fallback_nodes, 0);
  EXPECT_TRUE(c.report.perf_hints.empty());
  std::vector<Tensor> in{values({3, 5}, 1)};
  expect_equal(c.run(borrow(in)), eager(g, in));
}

TEST(CompilePartitioned, ListOutputsAndInputsReturnedAsOutputsCrossPieces) {
  // parts = split(x, 2, dim 2) (unsupported), then sin(parts[1]) * parts[2]; x is also returned
  Graph g;
  Ref x = g.add_input("x", "arg[1]", fake({2, 4}));
  std::vector<Ref> parts = node(g, Op::split, {x, Value(int64_t(2)), Value(int64_t(2))});
  ASSERT_EQ(parts.size(), 2u);
  Ref s = unary(g, Op::sin, parts[0]);
  g.outputs = {binary(g, Op::mul, s, parts[1]), x, parts[1]};
  FakeBackend fake({Op::sin, Op::mul});
  Compiled c = backends::compile_partitioned(fake, backends::find("eager"), g, {});
  EXPECT_EQ(c.report.fallback_nodes, 1);
  std::vector<Tensor> in{values({2, 4}, -1)};
  expect_equal(c.run(borrow(in)), eager(g, in));
}

TEST(CompilePartitioned, WritesIntoInputsStayInOrder) {
  // y = x * 2; x:copy_(y + 1) (copy_ unsupported); return x * 3: reads the written x
  Graph g;
  Ref x = g.add_input("x", "arg[1]", fake({4}));
  Ref two = node(g, Op::mul, {x, Value(2.0)})[0];
  Ref one = node(g, Op::add, {two, Value(1.0)})[0];
  node(g, Op::copy_, {x, one});
  g.outputs.push_back(node(g, Op::mul, {x, Value(3.0)})[0]);
  FakeBackend fake({Op::mul, Op::add});
  Compiled c = backends::compile_partitioned(fake, backends::find("eager"), g, {});
  EXPECT_EQ(fake.graphs, (std::vector<std::vector<std::string>>{{"mul", "add"}, {"mul"}}));
  std::vector<Tensor> a{values({4}, 0)}, b{values({4}, 0)};
  std::vector<Tensor> got = c.run(borrow(a));
  expect_equal(got, eager(g, b));
  expect_equal(a, b);  // the write reached the caller's tensor
  EXPECT_FLOAT_EQ(got[0].contiguous().data<float>()[1], (0.25 * 2 + 1) * 3);
}

TEST(CompilePartitioned, WritesOnEagerIntoViewsReachTheTensor) {
  // c = x * 1; c[2] = y (select, then copy_ on eager); return c * 2, on a backend that gives every
  // result a new buffer: the select must run on eager with the copy_ or the write is lost
  Graph g;
  Ref x = g.add_input("x", "arg[1]", fake({3, 4}));
  Ref y = g.add_input("y", "arg[2]", fake({4}));
  Ref c = node(g, Op::mul, {x, Value(1.0)})[0];
  Ref row = node(g, Op::select, {c, Value(int64_t(1)), Value(int64_t(2))})[0];
  node(g, Op::copy_, {row, y});
  g.outputs.push_back(node(g, Op::mul, {c, Value(2.0)})[0]);
  FakeBackend fake({Op::mul, Op::select});
  fake.fresh_outputs = true;
  Compiled comp = backends::compile_partitioned(fake, backends::find("eager"), g, {});
  EXPECT_EQ(fake.graphs, (std::vector<std::vector<std::string>>{{"mul"}, {"mul"}}));
  EXPECT_EQ(comp.report.fallback_nodes, 2);
  ASSERT_EQ(comp.report.perf_hints.size(), 2u);
  EXPECT_NE(comp.report.perf_hints[0].find("select is a view written by a node that runs on eager"),
            std::string::npos) << comp.report.perf_hints[0];
  std::vector<Tensor> in{values({3, 4}, 0), values({4}, 100)};
  std::vector<Tensor> got = comp.run(borrow(in));
  expect_equal(got, eager(g, in));
  EXPECT_FLOAT_EQ(got[0].contiguous().data<float>()[5], 2 * 100.25f);  // row 2, column 2
}

TEST(CompilePartitioned, ViewsTakenBeforeAWriteOnEagerSeeIt) {
  // v = x:t(); x:copy_(y) (on eager); return v * 2: v aliases x, as in eager
  Graph g;
  Ref x = g.add_input("x", "arg[1]", fake({2, 3}));
  Ref y = g.add_input("y", "arg[2]", fake({2, 3}));
  Ref v = node(g, Op::t, {x})[0];
  node(g, Op::copy_, {x, y});
  g.outputs.push_back(node(g, Op::mul, {v, Value(2.0)})[0]);
  FakeBackend fake({Op::mul, Op::t});
  fake.fresh_outputs = true;
  Compiled comp = backends::compile_partitioned(fake, backends::find("eager"), g, {});
  EXPECT_EQ(fake.graphs, (std::vector<std::vector<std::string>>{{"mul"}}));
  std::vector<Tensor> a{values({2, 3}, 0), values({2, 3}, 10)}, b{values({2, 3}, 0), values({2, 3}, 10)};
  expect_equal(comp.run(borrow(a)), eager(g, b));
  expect_equal(a, b);
}

TEST(CompileGraph, UnknownModeAndOptionsAreValueErrors) {
  Graph g = chain();
  backends::CompileOptions bad_mode;
  bad_mode.mode = "fastest";
  try {
    backends::compile_graph(g, "eager", bad_mode);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ValueError);
    EXPECT_NE(std::string(e.what()).find("unknown mode \"fastest\""), std::string::npos) << e.what();
  }
  backends::CompileOptions bad_option;
  bad_option.options.emplace_back("unroll", Value(true));
  try {
    backends::compile_graph(g, "eager", bad_option);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::ValueError);
    EXPECT_NE(std::string(e.what()).find("has no option 'unroll'"), std::string::npos) << e.what();
  }
}

TEST(Registry, GraphCompilerCarriesTheRegistrysLists) {
  GraphCompiler c = backends::graph_compiler();
  ASSERT_EQ(c.backends.size(), backends::names().size());
  for (size_t i = 0; i < c.backends.size(); i++) EXPECT_EQ(c.backends[i].first, backends::names()[i]);
  EXPECT_EQ(c.modes, backends::modes());
  EXPECT_EQ(c.modes[0], "default");
}

TEST(CompilePartitioned, AnOpErrorNamesTheNodeOfTheWholeGraph) {
  // sin(x):index_select(1, i) * 2 with index_select unsupported: its eager piece raises for the
  // out-of-range index, and the error names index_select's node of the whole graph (its user
  // line), not the node's index inside the piece
  Graph g;
  Ref x = g.add_input("x", "arg[1]", fake({3}));
  Ref i = g.add_input("i", "arg[2]", Tensor::fake({1}, {1}, DType::Int64));
  Ref s = unary(g, Op::sin, x);
  Ref picked = node(g, Op::index_select, {s, Value(int64_t(1)), i})[0];
  g.outputs.push_back(node(g, Op::mul, {picked, Value(2.0)})[0]);
  FakeBackend fake({Op::sin, Op::mul});
  Compiled c = backends::compile_partitioned(fake, backends::find("eager"), g, {});
  Tensor index = Tensor::empty({1}, DType::Int64);
  index.data<int64_t>()[0] = 4;
  std::vector<Tensor> in{values({3}, 0), index};
  try {
    c.run(borrow(in));
    FAIL() << "an index out of range ran";
  } catch (const NodeError& e) {
    EXPECT_EQ(e.node, picked.node);
    EXPECT_EQ(e.kind(), ErrorKind::IndexError);
  }
}
