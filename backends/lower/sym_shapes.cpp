// Symbolic sizes: every size, stride and offset of the graph as a polynomial in its dynamic dims.
// The meta rules are the only shape logic tc has, so instead of restating them symbolically we
// run them again with the dynamic dims set to other values and fit the multilinear polynomial
// through the corners (2^K runs for K dims), then check it at one more point. Anything that is
// not such a polynomial (ceil divisions of pools over a dynamic dim ...) is refused.
#include <algorithm>

#include "lower_internal.h"
#include "tc/error.h"

namespace tc::lower {

Stack fake_call(Op op, const Stack& args) {
  for (const Value& v : args)
    if (v.is_tensor() || v.is_tensor_list()) return call(op, args);  // fake inputs: meta rule only
  Stack out;
  for (const TensorMeta& m : infer_meta(op, args)) out.push_back(Tensor::fake(m.sizes, m.strides, m.dtype, m.device));
  return out;
}

namespace {

using Flat = std::vector<std::vector<int64_t>>;  // per node: every output's sizes/strides/offset

// Input strides for new sizes, keeping the stride order of the example (dense inputs only).
Shape restride(const Tensor& t, const Shape& sizes) {
  if (t.is_contiguous()) return contiguous_strides(sizes);
  int r = int(t.dim());
  std::vector<int> order(r);
  for (int i = 0; i < r; i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return t.strides()[a] < t.strides()[b]; });
  Shape st(r);
  int64_t expect = 1;
  for (int d : order) {
    TC_CHECK(t.strides()[d] == expect || t.sizes()[d] == 1, NotImplementedError,
             "lowering: a dynamic input that is not dense (strides %s)", shape_string(t.strides()).c_str());
    st[d] = expect;
    expect *= sizes[d];
  }
  return st;
}

// `values` per symbol; dynamic dim k takes the value of its symbol symbol_of[k]
Flat evaluate(const capture::Graph& g, const std::vector<int>& symbol_of, const std::vector<int64_t>& values) {
  std::vector<Stack> fakes(g.nodes.size());
  for (size_t i = 0; i < g.inputs.size(); i++) {
    const Tensor& t = g.nodes[g.inputs[i]].fakes[0].tensor();
    Shape sizes = t.sizes();
    for (size_t k = 0; k < g.dynamic_dims.size(); k++)
      if (g.dynamic_dims[k].first == int(i)) sizes[g.dynamic_dims[k].second] = values[size_t(symbol_of[k])];
    fakes[g.inputs[i]] = {Tensor::fake(sizes, restride(t, sizes), t.dtype(), t.device())};
  }
  auto get = [&](capture::Ref r) -> const Tensor& {
    const Value& v = fakes[r.node][r.out];
    return r.elem >= 0 ? v.tensors()[r.elem] : v.tensor();
  };
  for (size_t n = 0; n < g.nodes.size(); n++) {
    const capture::Node& node = g.nodes[n];
    if (node.kind == capture::NodeKind::Input) continue;
    TC_CHECK(node.kind == capture::NodeKind::Op, NotImplementedError,
             "lowering: dynamic sizes through the external function %s", node.target());
    Stack args;
    for (const capture::NodeArg& a : node.args) {
      if (a.kind == capture::NodeArg::Kind::Const) {
        args.push_back(a.constant);
      } else if (a.kind == capture::NodeArg::Kind::Ref) {
        args.push_back(get(a.refs[0]));
      } else {
        TensorList l;
        for (capture::Ref r : a.refs) l.push_back(get(r));
        args.push_back(std::move(l));
      }
    }
    fakes[n] = fake_call(node.op, args);
  }
  Flat out(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); n++)
    for (const Value& v : fakes[n]) {
      TensorList ts = v.is_tensor() ? TensorList{v.tensor()} : v.tensors();
      for (const Tensor& t : ts) {
        out[n].push_back(t.dim());
        out[n].insert(out[n].end(), t.sizes().begin(), t.sizes().end());
        out[n].insert(out[n].end(), t.strides().begin(), t.strides().end());
        out[n].push_back(t.offset());
      }
    }
  return out;
}

// The graph's meta rules may refuse other sizes (a view to fixed sizes of a dynamic dim): then the
// sizes are not symbolic after all, and lowering refuses the graph.
Flat evaluate_or_refuse(const capture::Graph& g, const std::vector<int>& symbol_of, const std::vector<int64_t>& values) {
  try {
    return evaluate(g, symbol_of, values);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::NotImplementedError) throw;
    TC_FAIL(NotImplementedError, "lowering: the graph's sizes do not follow its dynamic dims (%s)", e.what());
  }
}

}  // namespace

Shapes sym_shapes(const capture::Graph& g) {
  // Duck sizing: dynamic dims of equal size share one symbol (a batch dim of x and of its target y
  // vary together: varied apart, the graph's broadcasts refuse them). The backends check at each
  // call that the dims sharing a symbol are still equal, and run the call on eager when not.
  Shapes s;
  std::vector<int64_t> base;
  for (auto [input, dim] : g.dynamic_dims) {
    int64_t v = g.nodes[g.inputs[input]].fakes[0].tensor().sizes()[dim];
    int k = int(std::find(base.begin(), base.end(), v) - base.begin());
    if (k == int(base.size())) base.push_back(v);
    s.symbol_of.push_back(k);
  }
  const int K = int(base.size());
  TC_CHECK(K <= 4, NotImplementedError, "lowering: more than 4 dynamic sizes (%d)", K);
  std::vector<int64_t> step(K, 3);
  const std::vector<int>& symbol_of = s.symbol_of;
  // Corner c (bit k: symbol k at base + step) -> flat metas.
  std::vector<Flat> corners;
  for (int c = 0; c < (1 << K); c++) {
    std::vector<int64_t> vals = base;
    for (int k = 0; k < K; k++)
      if (c >> k & 1) vals[k] += step[k];
    corners.push_back(K == 0 ? Flat{} : evaluate_or_refuse(g, symbol_of, vals));
  }
  std::vector<int64_t> probe = base;
  for (int k = 0; k < K; k++) probe[k] += 7;
  Flat check = K == 0 ? Flat{} : evaluate_or_refuse(g, symbol_of, probe);

  s.of_node.resize(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); n++) {
    std::vector<Tensor> outs;
    for (const Value& v : g.nodes[n].fakes) {
      if (v.is_tensor()) outs.push_back(v.tensor());
      if (v.is_tensor_list())
        for (const Tensor& t : v.tensors()) outs.push_back(t);
    }
    size_t pos = 0;
    auto fit = [&](int64_t example) -> SymInt {
      size_t at = pos++;
      if (K == 0) return SymInt::of(example);
      std::vector<int64_t> a(1 << K);
      for (int c = 0; c < (1 << K); c++) {
        TC_CHECK(at < corners[c][n].size(), NotImplementedError,
                 "lowering: the rank of %s depends on a dynamic size", g.nodes[n].name.c_str());
        a[c] = corners[c][n][at];
      }
      for (int k = 0; k < K; k++)
        for (int i = 0; i < (1 << K); i++) {
          if (i >> k & 1) continue;
          int64_t fu = a[i], fw = a[i | 1 << k];
          TC_CHECK((fw - fu) % step[k] == 0, NotImplementedError,
                   "lowering: a size of %s is not a polynomial in the dynamic sizes", g.nodes[n].name.c_str());
          int64_t slope = (fw - fu) / step[k];
          a[i] = fu - base[k] * slope;
          a[i | 1 << k] = slope;
        }
      SymInt r;
      for (int c = 0; c < (1 << K); c++) {
        SymInt term = SymInt::of(a[c]);
        for (int k = 0; k < K; k++)
          if (c >> k & 1) term = term * SymInt::sym(k);
        r = r + term;
      }
      TC_CHECK(r.eval(probe) == check[n][at] && r.eval(base) == example, NotImplementedError,
               "lowering: a size of %s is not a polynomial in the dynamic sizes", g.nodes[n].name.c_str());
      return r;
    };
    for (const Tensor& t : outs) {
      SymMeta m;
      m.dtype = t.dtype();
      fit(t.dim());
      for (int64_t d : t.sizes()) m.sizes.push_back(fit(d));
      for (int64_t d : t.strides()) m.strides.push_back(fit(d));
      m.offset = fit(t.offset());
      s.of_node[n].push_back(std::move(m));
    }
  }
  return s;
}

}  // namespace tc::lower
