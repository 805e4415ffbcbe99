// In-place writes into views (PyTorch's CopySlices): after x[...] = y or v:add_(...) on a view v of
// a base that takes part in autograd, the base's history is "the old base with v's region replaced
// by the written values", and v's is a view of that. Views of the base made before the write get
// their history again from the base's when they are next used (their old one misses the write).
// The regions are strided views of the base's gradient: the base must be contiguous, and building
// a differentiable backward (create_graph) through these nodes is not supported yet.
#include "autograd_internal.h"

namespace tc::autograd {
namespace {

// v's elements as a strided view of its (contiguous) base, in the base's elements
struct Region {
  Shape sizes, strides;
  int64_t offset;
};
Region region_of(const Tensor& v, const Tensor& base) { return {v.sizes(), v.strides(), v.offset() - base.offset()}; }
Tensor view_region(const Tensor& g, const Region& r) { return g.as_strided(r.sizes, r.strides, g.offset() + r.offset); }
InputMeta meta(const Tensor& t) { return InputMeta{t.sizes(), t.dtype(), t.device()}; }

void no_create_graph(bool create_graph) {
  TC_CHECK(!create_graph, NotImplementedError,
           "create_graph through a view that was written in place is not supported yet (compute the value "
           "out of place, e.g. with where, cat or index_select)");
}

std::shared_ptr<Node> new_node(const char* name, Op op, const InputMeta& out) {
  auto n = std::make_shared<Node>();
  n->op = op;
  n->custom_name = name;
  n->outputs = {out};
  n->pre_hooks.resize(1);
  n->retained.resize(1);
  n->seq = g_next_seq++;
  return n;
}

// v as a view of base's current history: the gradient goes into v's region of a zero base.
std::shared_ptr<Node> view_node(const Tensor& base, const Tensor& v) {
  for (int64_t d = 0; d < v.dim(); d++)
    TC_CHECK(v.strides()[d] != 0 || v.sizes()[d] <= 1, NotImplementedError,
             "a broadcast view of a tensor that was written in place through another view is used in autograd: "
             "take the view again after the in-place write");
  auto n = new_node("AsStridedBackward0", Op::view, meta(v));  // a view op: leaf_or_view_of_leaf follows it
  n->next = {edge_of(base)};
  Region r = region_of(v, base);
  InputMeta bm = meta(base);
  n->custom = [r, bm](Node&, const std::vector<Tensor>& g, bool create_graph) {
    no_create_graph(create_graph);
    Tensor z = op(Op::zeros, {Value(IntList(bm.sizes.begin(), bm.sizes.end()))},
                  {{"dtype", Value(g[0].dtype())}, {"device", Value(g[0].device())}});
    view_region(z, r).copy_from(g[0]);
    return std::vector<Tensor>{z};
  };
  return n;
}

}  // namespace

void note_view(const Tensor& input, const Tensor& view) {
  const auto& root = input.impl()->view_base;
  view.impl()->view_base = root ? root : input.impl_ptr();
  const auto& bm = view.impl()->view_base->autograd;
  if (bm && bm->rebases) meta_of(view).base_rebases = bm->rebases;
}

void check_view_inplace(const char* opname, const Tensor& v) {
  Tensor base(v.impl()->view_base);
  TC_CHECK(!(base.requires_grad() && is_leaf(base)), ValueError,
           "%s(): a view of a leaf tensor that requires grad is being used in an in-place operation (modify it "
           "under tc.no_grad(), or work on x:detach())",
           opname);
  TC_CHECK(base.is_contiguous(), NotImplementedError,
           "%s(): in-place write into a view of a non-contiguous tensor that takes part in autograd is not "
           "supported yet (make the base contiguous first, or compute the value out of place)",
           opname);
  for (int64_t d = 0; d < v.dim(); d++)
    TC_CHECK(v.strides()[d] != 0 || v.sizes()[d] <= 1, ValueError,
             "%s(): unsupported operation: more than one element of the written-to tensor refers to a single "
             "memory location (clone it before writing)",
             opname);
}

bool refresh_view(const Tensor& t) {
  const auto& bm = t.impl()->view_base->autograd;
  uint32_t now = bm ? bm->rebases : 0;
  uint32_t made = t.impl()->autograd ? t.impl()->autograd->base_rebases : 0;
  if (now == made) return t.requires_grad();
  Tensor base(t.impl()->view_base);
  if (base.requires_grad())
    link_output(t, view_node(base, t), 0);
  else
    meta_of(t).base_rebases = now;
  return t.requires_grad();
}

void rebase_view(const Tensor& v, std::shared_ptr<Node> inner) {
  Tensor base(v.impl()->view_base);
  Region r = region_of(v, base);
  auto cs = new_node("CopySlices", Op::copy_, meta(base));
  cs->next.push_back(base.requires_grad() ? edge_of(base) : Edge{});
  if (inner) cs->next.insert(cs->next.end(), inner->next.begin(), inner->next.end());
  cs->custom = [r, inner](Node&, const std::vector<Tensor>& g, bool create_graph) {
    no_create_graph(create_graph);
    Tensor old = g[0].clone();  // contiguous, like the base
    Tensor written = view_region(old, r).clone();
    call(Op::fill_, bind(Op::fill_, {Value(view_region(old, r)), Value(0.0)}, {}));
    std::vector<Tensor> out{old};
    if (inner) {
      std::vector<Tensor> in = apply_formulas(*inner, {written}, false);
      out.insert(out.end(), in.begin(), in.end());
    }
    return out;
  };
  link_output(base, cs, 0);
  meta_of(base).rebases++;
  link_output(v, view_node(base, v), 0);
}

}  // namespace tc::autograd
