// Views among a compiled graph's outputs alias as they do in eager, also where the graph is cut
// into pieces: y = zeros(3, 4); y[i]:copy_(x[i] * i) for i = 1..3, with the cpu backend refusing
// copy_ (so the partitioner runs each copy_ on eager between generated pieces). A generated piece
// returns y[i] as a view of y's buffer, not a copy, so eager's write into it reaches y. Before,
// row 1 of the result stayed 0 (the view was stored by a copy kernel into its own buffer).
#include <gtest/gtest.h>

#include <set>

#include "graph_node.h"
#include "partitioned.h"
#include "tc/backends.h"

using namespace tc;
using namespace tc::capture;
using tc::backends::testing::node;

namespace {

// The cpu backend, refusing the ops given (the partitioner runs them on eager).
class CpuWithout final : public backends::Backend {
 public:
  explicit CpuWithout(std::set<Op> refused) : refused_(std::move(refused)) {}
  const char* name() const override { return "cpu-without"; }
  bool supports(const Node& n) const override { return n.kind != NodeKind::Op || !refused_.count(n.op); }
  std::vector<std::string> option_names() const override { return {}; }
  backends::Compiled compile(const Graph& g, const backends::CompileOptions& o) const override {
    return backends::find("cpu").compile(g, o);
  }

 private:
  std::set<Op> refused_;
};

Graph rows_filled_in_place() {
  Graph g;
  Ref x = g.add_input("x", "arg[1]", Tensor::fake({3, 4}, {4, 1}, DType::Float32));
  Ref y = node(g, Op::zeros, {Value(IntList{3, 4})})[0];
  for (int64_t i = 1; i <= 3; i++) {
    Ref row = node(g, Op::select, {y, Value(int64_t(1)), Value(i)})[0];
    Ref src = node(g, Op::mul, {node(g, Op::select, {x, Value(int64_t(1)), Value(i)})[0], Value(double(i))})[0];
    node(g, Op::copy_, {row, src});
  }
  g.outputs = {y, node(g, Op::select, {y, Value(int64_t(1)), Value(int64_t(2))})[0]};
  return g;
}

}  // namespace

TEST(QaOutputsAlias, RowsWrittenByEagerCopiesBetweenGeneratedPiecesReachTheirBase) {
  Graph g = rows_filled_in_place();
  Tensor x = Tensor::empty({3, 4}, DType::Float32);
  for (int64_t k = 0; k < 12; k++) x.data<float>()[k] = float(k + 1);
  std::vector<Tensor> in{x};
  std::vector<Tensor> want = backends::compile_graph(g, "eager").run(borrow(in));
  for (const char* how : {"cpu", "cpu, copy_ on eager"}) {
    CpuWithout without(std::string(how) == "cpu" ? std::set<Op>{} : std::set<Op>{Op::copy_});
    backends::Compiled c = backends::compile_partitioned(without, backends::find("eager"), g, {});
    std::vector<Tensor> got = c.run(borrow(in));
    ASSERT_EQ(got.size(), 2u);
    Tensor y = got[0].contiguous();
    for (int64_t r = 0; r < 3; r++)
      for (int64_t k = 0; k < 4; k++)
        EXPECT_EQ(y.data<float>()[r * 4 + k], float((r * 4 + k + 1) * (r + 1))) << how << " row " << r + 1;
    // the second output views the first, as in eager
    EXPECT_EQ(got[1].storage(), got[0].storage()) << how;
    EXPECT_EQ(got[1].offset() - got[0].offset(), want[1].offset() - want[0].offset()) << how;
  }
}

TEST(QaOutputsAlias, ViewsOfInputsAndOfOutputsShareStorageAsInEager) {
  // outputs: x:t(), x[2], y = x * 2, y:view(12), zeros z and z[1]: every view aliases its base
  Graph g;
  Ref x = g.add_input("x", "arg[1]", Tensor::fake({3, 4}, {4, 1}, DType::Float32));
  Ref y = node(g, Op::mul, {x, Value(2.0)})[0];
  Ref z = node(g, Op::zeros, {Value(IntList{2, 2})})[0];
  g.outputs = {node(g, Op::t, {x})[0], node(g, Op::select, {x, Value(int64_t(1)), Value(int64_t(2))})[0], y,
               node(g, Op::view, {y, Value(IntList{12})})[0], z,
               node(g, Op::select, {z, Value(int64_t(1)), Value(int64_t(1))})[0]};
  Tensor xin = Tensor::empty({3, 4}, DType::Float32);
  for (int64_t k = 0; k < 12; k++) xin.data<float>()[k] = float(k);
  std::vector<Tensor> in{xin};
  std::vector<Tensor> got = backends::compile_graph(g, "cpu").run(borrow(in));
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0].storage(), xin.storage());
  EXPECT_EQ(got[0].strides(), (Shape{1, 4}));
  EXPECT_EQ(got[1].storage(), xin.storage());
  EXPECT_EQ(got[1].offset(), xin.offset() + 4);
  EXPECT_EQ(got[3].storage(), got[2].storage());
  EXPECT_EQ(got[5].storage(), got[4].storage());
}
